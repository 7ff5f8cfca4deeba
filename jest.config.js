'use strict';

/**
 * Jest configuration: two projects.
 *
 * - `quick` (`npm test`, two files at a time): unit, property, security and in-process
 *   integration tests, with a real Redis and real upstreams on loopback.
 * - `servers` (`npm run test:servers`, one file at a time): the suites that start real servers
 *   or many processes (PostgreSQL clusters, nginx and Caddy, chromium, Redis Cluster and
 *   Sentinel, gateway processes, the packed kit), the timing-ratio suite and the long scale
 *   runs. A suite whose server is not installed skips with a loud notice, unless its `REQUIRE_*`
 *   variable is set (`.ci/run` sets them all).
 *
 * `npx jest path/to/file.test.ts` runs a file whichever project holds it.
 *
 * ts-jest reads compiler options from tsconfig.json. Because that file sets
 * `isolatedModules: true`, ts-jest transpiles each file on its own (fast, no
 * type checking); type errors are caught by `npm run typecheck` instead.
 *
 * @type {import('jest').Config}
 */

const { existsSync } = require('node:fs');
const path = require('node:path');

/** The `servers` project's files and folders (ending in `/`), from the repository's root. */
const SERVER_SUITES = [
  // PostgreSQL: each suite starts its own cluster.
  'test/integration/account-limits-database.test.ts',
  'test/integration/admin-database.test.ts',
  'test/integration/admin-edges-database.test.ts',
  'test/integration/database-fleet.test.ts',
  'test/integration/keys-cli-database.test.ts',
  'test/integration/keys-cli-limits.test.ts',
  'test/integration/keys-cli-permissions.test.ts',
  'test/integration/permissions-database.test.ts',
  'test/integration/pg-key-store.test.ts',
  'test/integration/pg-ring-follower.test.ts',
  'test/integration/doc-operating-keys.test.ts',
  'test/integration/doc-secret-scanning.test.ts',
  'test/integration/secret-scanning-database.test.ts',
  // nginx and Caddy in front of the gateway; chromium on the dashboard.
  'test/proxies/real-proxies.test.ts',
  'test/proxies/tracing-export.test.ts',
  'test/browser/dashboard.test.ts',
  // Several gateway processes, Redis Cluster and Sentinel, the packed kit in fresh apps.
  'test/multiprocess/',
  'test/package/package.test.ts',
  'test/security/key-reloads.test.ts',
  // Costs measured as ratios of timings, which another file running beside them would skew.
  'test/security/linear-cost.test.ts',
  // Scale runs: 200,000 keys, 10,000 distinct keys and addresses, long random sequences.
  'test/unit/packed-key-ring.test.ts',
  'test/integration/metrics.test.ts',
  'test/unit/rate-limit/ipv4-table.test.ts',
  'test/unit/rate-limit/compact-memory-store.test.ts',
];

const shared = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  transform: {
    '^.+\\.tsx?$': ['ts-jest', { tsconfig: 'tsconfig.json' }],
  },
  moduleFileExtensions: ['ts', 'js', 'json', 'node'],
  modulePathIgnorePatterns: ['<rootDir>/dist/'],
  // Every app and gateway process a test starts checks its answers against the API description.
  setupFiles: ['<rootDir>/test/helpers/answer-checks.ts'],
};
// A renamed or moved suite would otherwise drop silently into the quick set.
for (const suite of SERVER_SUITES) {
  if (!existsSync(path.join(__dirname, suite))) {
    throw new Error(`jest.config.js lists ${suite} among the server suites, but it does not exist`);
  }
}

const ignored = ['/node_modules/', '/dist/'];
const escapeRegExp = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const serverPatterns = SERVER_SUITES.map((suite) => `<rootDir>/${escapeRegExp(suite)}`);

module.exports = {
  projects: [
    {
      ...shared,
      displayName: 'quick',
      testMatch: ['**/*.test.ts'],
      testPathIgnorePatterns: [...ignored, ...serverPatterns],
    },
    {
      ...shared,
      displayName: 'servers',
      testMatch: SERVER_SUITES.map((suite) =>
        suite.endsWith('/') ? `<rootDir>/${suite}**/*.test.ts` : `<rootDir>/${suite}`,
      ),
      testPathIgnorePatterns: ignored,
    },
  ],
  watchPathIgnorePatterns: ['<rootDir>/dist/'],
  coveragePathIgnorePatterns: ['/node_modules/', '/dist/', '/test/'],
  testTimeout: 20000,
  // One test file at a time unless the command says otherwise: several suites start real servers
  // (Redis Cluster, PostgreSQL, nginx, Caddy, gateway processes) and several assert bounded waits
  // or linear cost; two such files side by side on a two-core machine made those assertions fail
  // about one run in two.
  maxWorkers: 1,
};
