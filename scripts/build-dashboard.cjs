'use strict';
/**
 * Builds the operators' dashboard (dashboard/) into dist/dashboard/: the script and the stylesheet
 * bundled by esbuild under names that carry their content's hash (served as immutable), and
 * index.html pointing at them. Nothing is fetched at run time. Run by `npm run build`, after tsc.
 */
const { mkdirSync, readFileSync, rmSync, writeFileSync } = require('node:fs');
const path = require('node:path');
const esbuild = require('esbuild');

const root = path.join(__dirname, '..');
const source = path.join(root, 'dashboard');
const out = path.join(root, 'dist', 'dashboard');

rmSync(out, { recursive: true, force: true });
mkdirSync(path.join(out, 'assets'), { recursive: true });
const result = esbuild.buildSync({
  entryPoints: [path.join(source, 'main.ts'), path.join(source, 'style.css')],
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['chrome115', 'firefox115', 'safari16'],
  entryNames: '[name]-[hash]',
  outdir: path.join(out, 'assets'),
  metafile: true,
  legalComments: 'none',
  logLevel: 'warning',
});
const built = Object.keys(result.metafile.outputs).map((file) => path.basename(file));
const named = (extension) => {
  const file = built.find((name) => name.endsWith(extension));
  if (file === undefined) throw new Error(`the dashboard build made no ${extension} file`);
  return file;
};
const page = readFileSync(path.join(source, 'index.html'), 'utf8')
  .replace('{{script}}', named('.js'))
  .replace('{{style}}', named('.css'));
writeFileSync(path.join(out, 'index.html'), page);
