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

  // The decision core and what it reads never import Express or the Express door
  // (`npm run deps`, dependency-cruiser, checks the same and import cycles).
  {
    files: [
      'lib/core/**/*.ts',
      'lib/keys/**/*.ts',
      'lib/tokens/**/*.ts',
      'lib/rate-limit/**/*.ts',
      'lib/forward-auth/**/*.ts',
    ],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['express', 'express/*', 'cors', 'body-parser', '**/express/*'],
              message: 'The decision core is framework-free: doors build facts, the core decides.',
            },
          ],
        },
      ],
    },
  },

  // Express 4 does not catch a promise rejected by a middleware: the kit's return none.
  {
    files: ['lib/**/*.ts'],
    rules: {
      '@typescript-eslint/no-misused-promises': 'error',
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
      'gateway/keys-cli/**',
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
