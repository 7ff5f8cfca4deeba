'use strict';

/**
 * `npm run build`: the API description (`openapi/`) beside the compiled gateway, at
 * `dist/openapi/`, where `dist/gateway/openapi/document.js` reads it (two folders up, as in the
 * source tree).
 */

const { cpSync, rmSync } = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const target = path.join(root, 'dist', 'openapi');
rmSync(target, { recursive: true, force: true });
cpSync(path.join(root, 'openapi'), target, { recursive: true });
