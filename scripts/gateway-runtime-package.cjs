'use strict';
/**
 * For the gateway's container image: rewrites package.json so that `npm install --omit=dev`
 * installs what the sample gateway runs on. The package lists the gateway's own run-time
 * dependencies (`gatewayDependencies`: Redis client, logger, HTTP client, Express) among its
 * devDependencies, so that an app installing the kit does not get them; the image needs them, at
 * the versions of package-lock.json.
 */
const { readFileSync, writeFileSync } = require('node:fs');
const path = require('node:path');

const file = path.join(process.cwd(), 'package.json');
const pkg = JSON.parse(readFileSync(file, 'utf8'));
for (const name of pkg.gatewayDependencies) {
  const version = pkg.devDependencies[name];
  if (version === undefined) throw new Error(`gatewayDependencies: ${name} is not a devDependency`);
  pkg.dependencies[name] = version;
}
delete pkg.devDependencies;
delete pkg.scripts;
writeFileSync(file, `${JSON.stringify(pkg, null, 2)}\n`);
