/**
 * The layers of the kit, checked by `npm run deps` (and `.ci/run`):
 * no import cycle; every import in lib/ runs down or across its own floor, never up (the floors
 * below); the decision core and what it reads never import Express nor the Express door; the
 * examples use only the package's public entries, and the gateway those and the internal entry
 * (lib/internal.ts, not among the package's exports).
 */

/**
 * The floors of lib/, lowest first: a file imports from its own floor and the ones below it.
 *
 * 1. the kit's errors and option checks;
 * 2. the shared words: roles, permissions, whitelists, addresses, key format and key records;
 * 3. the stores and services: keys, rate-limit counters, tokens, idempotency records, and the
 *    host thread that keeps a process's in-memory counters and records for its worker threads;
 * 4. the framework-free decision core;
 * 5. the forward-authentication dialects;
 * 6. the Express door (with `req`'s typed fields);
 * 7. the package's entries.
 */
const FLOORS = [
  '^lib/(errors|options|optional-module)\\.ts$',
  '^lib/model/',
  '^lib/(keys|rate-limit|tokens|idempotency|host)/',
  '^lib/core/',
  '^lib/forward-auth/',
  '^lib/express/|^lib/types\\.ts$',
  '^lib/(index|internal)\\.ts$|^lib/entry/',
];

/** One rule per floor: nothing on it imports from a floor above. */
const noUpwardImports = FLOORS.slice(0, -1).map((floor, index) => ({
  name: `floor-${index + 1}-imports-nothing-above`,
  severity: 'error',
  comment: 'Each floor of lib/ builds on the ones below it only.',
  from: { path: floor },
  to: { path: FLOORS.slice(index + 1).join('|') },
}));

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...noUpwardImports,
    {
      name: 'core-reads-keys-through-the-model',
      severity: 'error',
      comment:
        'The decision core knows a key store by its interface (lib/model), never by an implementation.',
      from: { path: '^lib/core/' },
      to: { path: '^lib/keys/' },
    },
    {
      name: 'every-lib-file-on-a-floor',
      severity: 'error',
      comment: 'A new folder of lib/ takes its place among the floors above.',
      from: { path: '^lib/', pathNot: FLOORS.join('|') },
      to: {},
    },
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'Import cycles make the layers meaningless and the load order fragile.',
      from: { path: '^(lib|gateway)/' },
      to: { circular: true },
    },
    {
      name: 'core-without-express',
      severity: 'error',
      comment: 'The decision core is framework-free: doors build facts, the core decides.',
      from: { path: '^lib/(core|keys|tokens|rate-limit|host|forward-auth)/' },
      to: { path: '(^|/)node_modules/(express|@types/express|body-parser|cors)/|^lib/express/' },
    },
    {
      name: 'gateway-uses-the-entries',
      severity: 'error',
      comment:
        'The sample gateway is built from the package as users get it, plus the internal entry.',
      from: { path: '^gateway/' },
      to: { path: '^lib/', pathNot: '^lib/(index|internal|entry/[a-z-]+)\\.ts$' },
    },
    {
      name: 'examples-use-the-public-entries',
      severity: 'error',
      comment: 'An example shows what users can write: only the entries in package.json exports.',
      from: { path: '^examples/' },
      to: { path: '^lib/', pathNot: '^lib/(index|entry/[a-z-]+)\\.ts$' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^dist/' },
  },
};
