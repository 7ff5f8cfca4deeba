'use strict';

/**
 * Jest configuration.
 *
 * ts-jest reads compiler options from tsconfig.json. Because that file sets
 * `isolatedModules: true`, ts-jest transpiles each file on its own (fast, no
 * type checking); type errors are caught by `npm run typecheck` instead.
 *
 * @type {import('jest').Config}
 */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: {
    '^.+\\.tsx?$': ['ts-jest', { tsconfig: 'tsconfig.json' }],
  },
  moduleFileExtensions: ['ts', 'js', 'json', 'node'],
  testPathIgnorePatterns: ['/node_modules/', '/dist/'],
  modulePathIgnorePatterns: ['<rootDir>/dist/'],
  watchPathIgnorePatterns: ['<rootDir>/dist/'],
  coveragePathIgnorePatterns: ['/node_modules/', '/dist/', '/test/'],
  testTimeout: 20000,
  maxWorkers: 2,
};
