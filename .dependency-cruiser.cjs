/**
 * The layers of the kit, checked by `npm run deps` (and `.ci/run`):
 * no import cycle; the decision core and what it reads (keys, tokens, rate-limit stores) never
 * import Express nor the Express door; the examples use only the package's public entries, and the
 * gateway those and the internal entry (lib/internal.ts, not among the package's exports).
 */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
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
      from: { path: '^lib/(core|keys|tokens|rate-limit|forward-auth)/' },
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
