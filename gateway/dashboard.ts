import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import express, { type Router } from 'express';
import { NotFoundError } from '../lib/internal';
import { methodNotAllowed } from '../lib/entry/express';

/**
 * The dashboard's page and assets, as `npm run build` made them
 * (scripts/build-dashboard.cjs): `GET /dashboard/` answers the page, never stored like every
 * answer of the admin listener; `GET /dashboard/assets/<name>-<hash>.js|css` its script and
 * stylesheet, which change name when they change and so are cached for a year. All are read once,
 * when the listener is made; nothing else on disk is ever served.
 */

const CONTENT_TYPES: Readonly<Record<string, string>> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

interface Asset {
  readonly body: Buffer;
  readonly type: string;
}

export function dashboardRoutes(): Router {
  const router = express.Router({ caseSensitive: true, strict: true });
  const built = builtDashboard();
  router.get(['/dashboard', '/dashboard/'], (req, res, next) => {
    if (built === undefined) {
      next(new NotFoundError());
      return;
    }
    if (req.path === '/dashboard') {
      res.redirect(308, '/dashboard/');
      return;
    }
    res.type('html').send(built.page);
  });
  router.get('/dashboard/assets/:name', (req, res, next) => {
    const asset = built?.assets.get(req.params.name);
    if (asset === undefined) {
      next(new NotFoundError());
      return;
    }
    res.setHeader('Cache-Control', 'public, max-age=31536000, immutable');
    res.setHeader('Content-Type', asset.type);
    res.end(asset.body);
  });
  router.all(['/dashboard', '/dashboard/', '/dashboard/assets/:name'], methodNotAllowed(['GET']));
  return router;
}

/** The built page and assets, or `undefined` when the build has not made them. */
function builtDashboard(): { page: Buffer; assets: Map<string, Asset> } | undefined {
  const folder = [
    path.join(__dirname, '..', 'dashboard'),
    path.join(__dirname, '..', 'dist', 'dashboard'),
  ].find((candidate) => existsSync(path.join(candidate, 'assets')));
  if (folder === undefined) return undefined;
  const assets = new Map<string, Asset>();
  for (const name of readdirSync(path.join(folder, 'assets'))) {
    const type = CONTENT_TYPES[path.extname(name)];
    if (type === undefined) continue;
    assets.set(name, { body: readFileSync(path.join(folder, 'assets', name)), type });
  }
  return { page: readFileSync(path.join(folder, 'index.html')), assets };
}
