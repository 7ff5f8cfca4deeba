import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { ROOT } from './process';
import { freePort } from './redis';

/**
 * Real nginx and Caddy (Debian's packages), started from the configurations shipped in `deploy/`
 * on free loopback ports, in front of a gateway and a payments upstream. Only the addresses
 * differ from what users run: the shipped location and route files are included as they are.
 * Missing binaries skip these suites loudly, unless REQUIRE_PROXIES=1 (set by `.ci/run`).
 */

export type RealProxy = 'nginx' | 'caddy';

export interface RunningProxy {
  readonly port: number;
  /** The proxy's own log, for a failing test's message. */
  log(): string;
  stop(): Promise<void>;
}

export interface ProxyTargets {
  /** host:port of the gateway (its forward-auth endpoints and the token exchange). */
  readonly gateway: string;
  /** host:port of the payments service. */
  readonly payments: string;
}

const CANDIDATES: Readonly<Record<RealProxy, readonly string[]>> = {
  nginx: ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/bin/nginx'],
  caddy: ['/usr/bin/caddy', '/usr/local/bin/caddy'],
};

export function proxyBinary(proxy: RealProxy): string | undefined {
  const onPath = (process.env.PATH ?? '')
    .split(path.delimiter)
    .map((directory) => path.join(directory, proxy));
  return [...onPath, ...CANDIDATES[proxy]].find((candidate) => existsSync(candidate));
}

/** `describe` for a real proxy: skipped with a loud notice when its binary is missing. */
export function describeWithProxy(proxy: RealProxy): jest.Describe {
  if (proxyBinary(proxy) !== undefined || process.env.REQUIRE_PROXIES === '1') return describe;
  process.stderr.write(
    `\n*** ${proxy} tests SKIPPED: ${proxy} is not installed (apt-get install ${proxy === 'nginx' ? 'nginx-light' : 'caddy'}; REQUIRE_PROXIES=1 makes this a failure) ***\n\n`,
  );
  return describe.skip;
}

export async function startProxy(proxy: RealProxy, targets: ProxyTargets): Promise<RunningProxy> {
  const binary = proxyBinary(proxy);
  if (binary === undefined) throw new Error(`REQUIRE_PROXIES=1 but ${proxy} is not installed`);
  const directory = mkdtempSync(path.join(os.tmpdir(), `tollgate-${proxy}-`));
  const port = await freePort();
  const logFile = path.join(directory, 'proxy.log');
  let child: ChildProcess;
  if (proxy === 'nginx') {
    writeFileSync(path.join(directory, 'nginx.conf'), nginxConfig(directory, port, targets));
    child = spawn(binary, ['-p', directory, '-c', path.join(directory, 'nginx.conf')], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
  } else {
    writeFileSync(path.join(directory, 'Caddyfile'), caddyConfig(port));
    child = spawn(
      binary,
      ['run', '--config', path.join(directory, 'Caddyfile'), '--adapter', 'caddyfile'],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
        env: {
          ...process.env,
          HOME: directory,
          XDG_DATA_HOME: directory,
          XDG_CONFIG_HOME: directory,
          TOLLGATE_ADDRESS: targets.gateway,
          PAYMENTS_ADDRESS: targets.payments,
        },
      },
    );
  }
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      resolve();
    }),
  );
  const log = (): string => {
    const file = existsSync(logFile) ? readFileSync(logFile, 'utf8') : '';
    return `${stderr}${file}`.slice(-4000);
  };
  if (!(await listening(port, 10_000))) {
    child.kill('SIGKILL');
    await exited;
    throw new Error(`${proxy} did not listen on 127.0.0.1:${port}:\n${log()}`);
  }
  return {
    port,
    log,
    stop: async () => {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

/** nginx's main file around the shipped deploy/nginx/tollgate-locations.conf. */
function nginxConfig(directory: string, port: number, targets: ProxyTargets): string {
  const locations = path.join(ROOT, 'deploy/nginx/tollgate-locations.conf');
  const runningAsRoot = process.getuid?.() === 0;
  return `daemon off;
master_process on;
worker_processes 1;
pid ${directory}/nginx.pid;
error_log ${directory}/proxy.log warn;
${runningAsRoot ? 'user root;' : ''}
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path ${directory}/client_body;
    proxy_temp_path ${directory}/proxy;
    fastcgi_temp_path ${directory}/fastcgi;
    uwsgi_temp_path ${directory}/uwsgi;
    scgi_temp_path ${directory}/scgi;
    upstream tollgate { server ${targets.gateway}; keepalive 8; }
    upstream payments_api { server ${targets.payments}; keepalive 8; }
    server {
        listen 127.0.0.1:${port};
        server_name _;
        include ${locations};
    }
}
`;
}

/** A Caddyfile around the shipped deploy/caddy/tollgate.caddy. */
function caddyConfig(port: number): string {
  const routes = path.join(ROOT, 'deploy/caddy/tollgate.caddy');
  return `{
	admin off
}

http://127.0.0.1:${port} {
	bind 127.0.0.1
	import ${routes}
}
`;
}

async function listening(port: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const open = await new Promise<boolean>((resolve) => {
      const socket = net.connect({ host: '127.0.0.1', port });
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => {
        resolve(false);
      });
    });
    if (open) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return false;
}
