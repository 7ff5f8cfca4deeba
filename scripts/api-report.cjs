'use strict';
/**
 * The API reports: one file per package entry in api/, written by Microsoft's API Extractor from
 * the built declarations (dist/lib). `npm run api` (with `--local`) rewrites them after a change
 * to the public surface; `npm run api:check` (without it) fails when the surface differs from the
 * committed reports, so no public change lands without showing in a report. Needs `npm run build`.
 */
const { existsSync, readFileSync } = require('node:fs');
const path = require('node:path');
const { Extractor, ExtractorConfig } = require('@microsoft/api-extractor');

const ROOT = path.join(__dirname, '..');

/** Report name (api/<name>.api.md) and built declarations of each entry in package.json `exports`. */
const ENTRIES = [
  ['tollgate', 'dist/lib/index.d.ts'],
  ['tollgate-core', 'dist/lib/entry/core.d.ts'],
  ['tollgate-express', 'dist/lib/entry/express.d.ts'],
  ['tollgate-forward-auth', 'dist/lib/entry/forward-auth.d.ts'],
  ['tollgate-postgres', 'dist/lib/entry/postgres.d.ts'],
  ['tollgate-redis', 'dist/lib/entry/redis.d.ts'],
];

const localBuild = process.argv.includes('--local');
let failed = false;
/** Types a public signature uses, by name, with the entry that uses them. */
const forgotten = new Map();
for (const [name, declarations] of ENTRIES) {
  if (!existsSync(path.join(ROOT, declarations))) {
    process.stderr.write(`api: ${declarations} is missing: run npm run build first\n`);
    process.exit(1);
  }
  const config = ExtractorConfig.prepare({
    configObjectFullPath: path.join(ROOT, 'api', `${name}.json`),
    packageJsonFullPath: path.join(ROOT, 'package.json'),
    configObject: {
      projectFolder: ROOT,
      mainEntryPointFilePath: path.join(ROOT, declarations),
      compiler: {
        overrideTsconfig: {
          compilerOptions: {
            target: 'es2022',
            module: 'node16',
            moduleResolution: 'node16',
            strict: true,
            types: ['node'],
          },
          files: [path.join(ROOT, declarations)],
        },
      },
      apiReport: {
        enabled: true,
        reportFileName: name,
        reportFolder: path.join(ROOT, 'api'),
        reportTempFolder: path.join(ROOT, 'dist', 'api'),
      },
      docModel: { enabled: false },
      dtsRollup: { enabled: false },
      tsdocMetadata: { enabled: false },
      messages: {
        // Findings about the surface (a type used but not exported, ...) are written into the
        // report, where a reviewer sees them; the kit has no release tags (alpha, beta), and
        // its doc comments document what needs it, not every member.
        extractorMessageReporting: {
          default: { logLevel: 'warning', addToApiReportFile: true },
          'ae-missing-release-tag': { logLevel: 'none', addToApiReportFile: false },
          'ae-undocumented': { logLevel: 'none', addToApiReportFile: false },
          // A type one entry's signatures use is often exported by another entry, whose report
          // shows it; these notes would carry .d.ts line numbers that move with every comment.
          // They are collected below instead: a type no entry exports fails the check.
          'ae-forgotten-export': { logLevel: 'none', addToApiReportFile: false },
        },
        // The doc comments are prose for readers, not TSDoc markup.
        tsdocMessageReporting: { default: { logLevel: 'none' } },
        compilerMessageReporting: { default: { logLevel: 'error' } },
      },
    },
  });
  const result = Extractor.invoke(config, {
    localBuild,
    showVerboseMessages: false,
    messageCallback: (message) => {
      const symbol = /^The symbol "([^"]+)"/.exec(message.text)?.[1];
      if (message.messageId === 'ae-forgotten-export' && symbol !== undefined) {
        forgotten.set(symbol, name);
      }
    },
  });
  if (!result.succeeded) {
    failed = true;
    process.stderr.write(
      result.apiReportChanged
        ? `api: the public surface of ${name} differs from api/${name}.api.md: run npm run api and commit the report\n`
        : `api: ${name}: ${String(result.errorCount)} errors, ${String(result.warningCount)} warnings\n`,
    );
  }
}
// A type that public signatures use must be in some entry's report, or a change to it would pass
// unseen.
const reported = new Set();
for (const [name] of ENTRIES) {
  const report = readFileSync(path.join(ROOT, 'api', `${name}.api.md`), 'utf8');
  for (const match of report.matchAll(
    /^export (?:declare )?(?:abstract )?(?:interface|type|class|function|const|enum) (\w+)/gm,
  )) {
    reported.add(match[1]);
  }
  for (const match of report.matchAll(/^export \{ \w+ as (\w+) \}/gm)) reported.add(match[1]);
}
for (const [symbol, entry] of forgotten) {
  // API Extractor renames a symbol whose name another one of the entry has (`KeyType_2`).
  if (!reported.has(symbol.replace(/_\d+$/, ''))) {
    failed = true;
    process.stderr.write(`api: ${entry} uses the type ${symbol}, which no entry exports\n`);
  }
}
if (failed) process.exit(1);
