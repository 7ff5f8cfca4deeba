'use strict';
/**
 * Preloaded with `node -r`: `require('express')` and `require('express/…')` load Express 4 (the
 * `express4` npm alias among the devDependencies), for the app and for the kit alike, as after
 * `npm install --no-save express@4` in a checkout.
 */
const Module = require('node:module');

const resolveFilename = Module._resolveFilename;
Module._resolveFilename = function resolveExpress4(request, ...rest) {
  const redirected =
    request === 'express' || request.startsWith('express/')
      ? `express4${request.slice('express'.length)}`
      : request;
  return resolveFilename.call(this, redirected, ...rest);
};
