'use strict';

const js = require('@eslint/js');
const { defineConfig, globalIgnores } = require('eslint/config');
const tseslint = require('typescript-eslint');

// Globals available to the CommonJS config files at the repository root
// (the `globals` package is not a dependency, so list the few we need).
const nodeCommonJsGlobals = {
  __dirname: 'readonly',
  __filename: 'readonly',
  console: 'readonly',
  exports: 'writable',
  module: 'readonly',
  process: 'readonly',
  require: 'readonly',
};

module.exports = defineConfig(
  globalIgnores(['dist/', 'node_modules/', 'coverage/']),

  js.configs.recommended,
  tseslint.configs.strictTypeChecked,
  tseslint.configs.stylisticTypeChecked,

  {
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: __dirname,
      },
    },
    rules: {
      'no-console': 'error',
      // Express error handlers must declare all four parameters; allow `_`-prefixed unused names.
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          caughtErrorsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
          ignoreRestSiblings: true,
        },
      ],
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
      // Express 5 handles promises returned by middleware/handlers itself.
      '@typescript-eslint/no-misused-promises': [
        'error',
        { checksVoidReturn: { arguments: false } },
      ],
    },
  },

  // Plain JavaScript (root config files): no type information.
  {
    files: ['**/*.js', '**/*.cjs', '**/*.mjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: {
      sourceType: 'commonjs',
      globals: nodeCommonJsGlobals,
    },
    rules: {
      '@typescript-eslint/no-require-imports': 'off',
    },
  },

  // Entry points, examples, benchmarks and tests may print.
  {
    files: [
      'gateway/server.ts',
      'gateway/keys-cli.ts',
      'gateway/stub-upstream-server.ts',
      'examples/**',
      'bench/**',
      'test/**',
    ],
    rules: {
      'no-console': 'off',
    },
  },

  {
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
);
