import type { RequestHandler } from 'express';

/**
 * Every answer of the admin listener, the dashboard's pages and its API alike: never
 * stored, never framed, no referrer, and a policy that lets a page run only this listener's own
 * scripts and styles.
 */
export const operatorHeaders: RequestHandler = function operatorHeadersMiddleware(_req, res, next) {
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Content-Security-Policy', CONTENT_SECURITY_POLICY);
  res.setHeader('X-Frame-Options', 'DENY');
  res.setHeader('Referrer-Policy', 'no-referrer');
  next();
};

const CONTENT_SECURITY_POLICY =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
  "frame-ancestors 'none'; base-uri 'none'; form-action 'self'";
