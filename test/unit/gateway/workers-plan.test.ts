import { loadConfig } from '../../../gateway/config';
import {
  autoWorkers,
  cgroupCpuQuota,
  portSharing,
  reusePortVersion,
  type WorkerPlatform,
} from '../../../gateway/workers/plan';
import { ConfigurationError } from '../../../lib/errors';

/**
 * `TOLLGATE_WORKERS`: a count or `auto`, resolved against what the platform offers (threads share
 * a port on Linux from Node 22.12 and 23.1) and the cores the process may use (its affinity and its
 * container's CPU quota).
 */

const LINUX_24: WorkerPlatform = {
  nodeVersion: '24.21.0',
  os: 'linux',
  parallelism: 8,
  cpuQuota: undefined,
};

function workersOf(value: string | undefined, platform: WorkerPlatform): number {
  return loadConfig(value === undefined ? {} : { TOLLGATE_WORKERS: value }, platform).workers;
}

function refusal(value: string, platform: WorkerPlatform): string {
  try {
    loadConfig({ TOLLGATE_WORKERS: value }, platform);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return (error as Error).message;
  }
  throw new Error(`TOLLGATE_WORKERS=${value} was accepted`);
}

describe('which Node versions share a port between threads', () => {
  it.each([
    ['20.20.2', false],
    ['22.11.0', false],
    ['22.12.0', true],
    ['22.21.1', true],
    ['23.0.0', false],
    ['23.1.0', true],
    ['24.0.0', true],
    ['25.2.1', true],
  ])('Node %s: %p', (version, expected) => {
    expect(reusePortVersion(version)).toBe(expected);
  });

  it('is refused off Linux, naming the platform', () => {
    const sharing = portSharing({ ...LINUX_24, os: 'darwin' });
    expect(sharing).toEqual({ ok: false, why: expect.stringContaining('darwin') as string });
  });
});

describe('the cores auto stands for', () => {
  it('is what the process may run on without a quota', () => {
    expect(autoWorkers(LINUX_24)).toBe(8);
  });

  it('is capped by the container quota, rounded down, and never below one', () => {
    expect(autoWorkers({ ...LINUX_24, cpuQuota: 2.5 })).toBe(2);
    expect(autoWorkers({ ...LINUX_24, cpuQuota: 0.5 })).toBe(1);
    expect(autoWorkers({ ...LINUX_24, parallelism: 3, cpuQuota: 6 })).toBe(3);
  });

  it('reads cgroup v2 cpu.max, and cgroup v1 when there is no v2 file', () => {
    const files =
      (entries: Record<string, string>) =>
      (file: string): string | undefined =>
        entries[file];
    expect(cgroupCpuQuota(files({ '/sys/fs/cgroup/cpu.max': '200000 100000\n' }))).toBe(2);
    expect(cgroupCpuQuota(files({ '/sys/fs/cgroup/cpu.max': 'max 100000\n' }))).toBeUndefined();
    expect(
      cgroupCpuQuota(
        files({
          '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '150000\n',
          '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n',
        }),
      ),
    ).toBe(1.5);
    expect(
      cgroupCpuQuota(
        files({
          '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '-1\n',
          '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n',
        }),
      ),
    ).toBeUndefined();
    expect(cgroupCpuQuota(files({}))).toBeUndefined();
  });
});

describe('TOLLGATE_WORKERS', () => {
  it('defaults to one thread', () => {
    expect(workersOf(undefined, LINUX_24)).toBe(1);
  });

  it('takes a count, or auto for the usable cores', () => {
    expect(workersOf('4', LINUX_24)).toBe(4);
    expect(workersOf('auto', LINUX_24)).toBe(8);
    expect(workersOf('auto', { ...LINUX_24, cpuQuota: 2 })).toBe(2);
  });

  it('is one thread for auto where threads cannot share a port', () => {
    expect(workersOf('auto', { ...LINUX_24, nodeVersion: '20.20.2' })).toBe(1);
  });

  it('refuses a count above one where threads cannot share a port, saying why', () => {
    expect(refusal('2', { ...LINUX_24, nodeVersion: '20.20.2' })).toBe(
      'TOLLGATE_WORKERS is 2, but threads share a port from Node 22.12 (this is Node 20.20.2): leave it unset, or run one gateway per core',
    );
    expect(refusal('2', { ...LINUX_24, os: 'win32' })).toMatch(
      /^TOLLGATE_WORKERS is 2, but threads share a port only on Linux \(this is win32\)/,
    );
    expect(workersOf('1', { ...LINUX_24, nodeVersion: '20.20.2' })).toBe(1);
  });

  it.each(['0', '257', 'two', '-1', '1.5', 'auto4'])('refuses %p', (value) => {
    expect(refusal(value, LINUX_24)).toMatch(
      /^TOLLGATE_WORKERS must be auto or a whole number from 1 to 256, got /,
    );
  });
});
