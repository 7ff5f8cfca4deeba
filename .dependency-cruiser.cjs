/**
 * The layers of the kit, checked by `npm run deps` (and `.ci/run`):
 * no import cycle; the decision core and what it reads (keys, tokens, rate-limit stores) never
 * import Express nor the Express door; the gateway and the examples use only the public entry.
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
      name: 'gateway-uses-the-public-entry',
      severity: 'error',
      comment: 'The sample gateway is built from the package as users get it.',
      from: { path: '^(gateway|examples)/' },
      to: { path: '^lib/', pathNot: '^lib/index\\.ts$' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^dist/' },
  },
};
