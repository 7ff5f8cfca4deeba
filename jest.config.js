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
  // One test file at a time: several suites start real servers (Redis Cluster, PostgreSQL, nginx,
  // Caddy, gateway processes) and several assert bounded waits or linear cost; two such files
  // side by side on a two-core machine made those assertions fail about one run in two.
  maxWorkers: 1,
};
