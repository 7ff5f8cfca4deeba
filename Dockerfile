# syntax=docker/dockerfile:1

# Build stage: compile TypeScript to dist/.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: no dependency needs an install script (package.json "allowScripts"), and the
# image need not read "allowScripts" the way the npm that wrote the lock file does: skip them.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY lib ./lib
COPY gateway ./gateway
# The admin API's description: copied to dist/openapi/ by the build, served by the admin listener.
COPY openapi ./openapi
# The operators' dashboard: bundled by esbuild into dist/dashboard/ at `npm run build`.
COPY dashboard ./dashboard
RUN npm run build

# Runtime stage: production dependencies and compiled output only.
FROM node:24-bookworm-slim AS runtime
# One thread per core the container may use (its CPU quota, `--cpus`), all serving PORT.
ENV NODE_ENV=production HOST=:: PORT=8080 TOLLGATE_WORKERS=auto
WORKDIR /app
COPY package.json package-lock.json ./
COPY scripts/gateway-runtime-package.cjs ./scripts/
# The gateway's own run-time dependencies are devDependencies of the kit (an app installing the
# kit does not get them): list them as dependencies here, at the lock file's versions.
RUN node scripts/gateway-runtime-package.cjs \
  && npm install --omit=dev --ignore-scripts --no-audit --no-fund \
  && npm cache clean --force
COPY --from=build /app/dist ./dist
# The SQL migrations, for `node dist/gateway/migrate.js` with TOLLGATE_DATABASE_URL.
COPY migrations ./migrations
COPY scripts/docker-entrypoint.sh /usr/local/bin/tollgate-entrypoint
# No USER line: the entry point drops from root to the owner of the keys file (never root), so a
# keys file written on the host by any user is readable. `docker run --user` still works as is.
ENTRYPOINT ["/usr/local/bin/tollgate-entrypoint"]
EXPOSE 8080
# Liveness: /healthz answers while the process serves, whatever its upstream or Redis do (a container
# restarted for its upstream's outage would not bring the upstream back). Readiness, for load
# balancers and `depends_on`, is /readyz: see docker-compose.yml.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["node", "-e", "require('http').get('http://127.0.0.1:' + (process.env.PORT || 8080) + '/healthz', (r) => process.exit(r.statusCode === 200 ? 0 : 1)).on('error', () => process.exit(1)).setTimeout(4000, () => process.exit(1))"]
# The same image runs the stub upstream: command `node dist/gateway/stub-upstream-server.js`.
CMD ["node", "dist/gateway/server.js"]
