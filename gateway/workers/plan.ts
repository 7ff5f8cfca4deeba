import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/**
 * How many threads serve the public listener. Several threads share one port through the kernel
 * (`SO_REUSEPORT`, Node's `listen({ reusePort: true })`), which Node offers from 22.12 (and 23.1)
 * and only on Linux; elsewhere the gateway serves from one thread and refuses a count above 1.
 */

/** The most threads the setting accepts: well above the cores of any host it is meant for. */
export const MAX_WORKERS = 256;

/** What the process runs on, read once; tests pass their own. */
export interface WorkerPlatform {
  /** `process.versions.node`. */
  readonly nodeVersion: string;
  /** `process.platform`. */
  readonly os: string;
  /** Cores the process may use: `os.availableParallelism()`. */
  readonly parallelism: number;
  /** The cgroup's CPU quota in cores (`cpu.max`), or `undefined` when none is set. */
  readonly cpuQuota: number | undefined;
}

/** This process's platform. */
export function currentPlatform(): WorkerPlatform {
  return {
    nodeVersion: process.versions.node,
    os: process.platform,
    parallelism: availableParallelism(),
    cpuQuota: cgroupCpuQuota(readCgroupFile),
  };
}

/** Whether threads can share a listening port here, and if not, why (for the refusal). */
export function portSharing(platform: WorkerPlatform): { ok: true } | { ok: false; why: string } {
  if (platform.os !== 'linux') {
    return { ok: false, why: `threads share a port only on Linux (this is ${platform.os})` };
  }
  if (!reusePortVersion(platform.nodeVersion)) {
    return {
      ok: false,
      why: `threads share a port from Node 22.12 (this is Node ${platform.nodeVersion})`,
    };
  }
  return { ok: true };
}

/** Node 22.12+, 23.1+ and every later major have `listen({ reusePort })`. */
export function reusePortVersion(version: string): boolean {
  const [major = 0, minor = 0] = version.split('.').map(Number);
  if (major === 22) return minor >= 12;
  if (major === 23) return minor >= 1;
  return major > 23;
}

/**
 * The cores `auto` stands for: what the process may run on (`availableParallelism()`, which
 * follows CPU affinity), capped by the container's CPU quota rounded down, and at least one.
 */
export function autoWorkers(platform: WorkerPlatform): number {
  const quota = platform.cpuQuota === undefined ? Infinity : Math.floor(platform.cpuQuota);
  return Math.max(1, Math.min(platform.parallelism, quota, MAX_WORKERS));
}

/**
 * The CPU quota of the process's cgroup in cores: cgroup v2's `cpu.max` (`200000 100000` is two
 * cores, `max 100000` none), else cgroup v1's `cpu.cfs_quota_us` over `cpu.cfs_period_us` (a
 * negative quota is none). `undefined` when no quota is set or none can be read.
 */
export function cgroupCpuQuota(read: (file: string) => string | undefined): number | undefined {
  const v2 = read('/sys/fs/cgroup/cpu.max');
  if (v2 !== undefined) {
    const [quota, period] = v2.trim().split(/\s+/);
    return coresOf(quota, period);
  }
  const quota = read('/sys/fs/cgroup/cpu/cpu.cfs_quota_us');
  const period = read('/sys/fs/cgroup/cpu/cpu.cfs_period_us');
  return coresOf(quota?.trim(), period?.trim());
}

function coresOf(quota: string | undefined, period: string | undefined): number | undefined {
  if (quota === undefined || period === undefined || quota === 'max') return undefined;
  const q = Number(quota);
  const p = Number(period);
  if (!Number.isFinite(q) || !Number.isFinite(p) || q <= 0 || p <= 0) return undefined;
  return q / p;
}

function readCgroupFile(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}
