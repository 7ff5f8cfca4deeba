import { readFileSync } from 'node:fs';

/**
 * `node dist/bench/profile-groups.js <file.cpuprofile>`: where a process's CPU time went, by
 * library, from a `node --cpu-prof` profile (the bench writes one per gateway with
 * BENCH_CPU_PROFILE=<dir>). Time in Node's own code or in native calls is charged to the nearest
 * library or Tollgate frame below it on the stack, so `undici` includes the socket writes undici
 * makes. Idle time is left out; shares are of busy time.
 */

interface ProfileNode {
  readonly id: number;
  readonly callFrame: { readonly functionName: string; readonly url: string };
  readonly children?: readonly number[];
}

interface Profile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

/** Express and the packages it is made of: one group, as a user sees it. */
const EXPRESS_PARTS = new Set([
  'express',
  'router',
  'body-parser',
  'parseurl',
  'finalhandler',
  'path-to-regexp',
  'on-finished',
  'depd',
  'qs',
  'send',
  'accepts',
  'type-is',
  'content-type',
  'negotiator',
  'mime-types',
  'encodeurl',
  'escape-html',
  'fresh',
  'range-parser',
  'proxy-addr',
  'forwarded',
  'vary',
  'setprototypeof',
  'statuses',
  'utils-merge',
  'merge-descriptors',
  'cookie',
  'cookie-signature',
  'etag',
  'debug',
  'ms',
]);

/** The group of a frame, or undefined for Node's own code and native frames. */
function groupOf(url: string): string | undefined {
  const modules = url.lastIndexOf('/node_modules/');
  if (modules !== -1) {
    const parts = url.slice(modules + '/node_modules/'.length).split('/');
    const name = parts[0]?.startsWith('@') === true ? `${parts[0]}/${parts[1]}` : (parts[0] ?? '');
    return EXPRESS_PARTS.has(name) ? 'express (router, req/res, its packages)' : name;
  }
  const dist = url.lastIndexOf('/dist/');
  if (dist !== -1) {
    const rest = url.slice(dist + '/dist/'.length).replace(/\.js$/, '');
    const [top, dir, file] = rest.split('/');
    if (top === 'lib') return `tollgate lib/${file === undefined ? dir : `${dir}/`}`;
    return `tollgate ${top}/${dir ?? ''}`;
  }
  return undefined;
}

export function groupProfile(profile: Profile): Map<string, number> {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) {
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const groupCache = new Map<number, string>();
  const groupOfNode = (id: number): string => {
    const cached = groupCache.get(id);
    if (cached !== undefined) return cached;
    const node = byId.get(id);
    const name = node?.callFrame.functionName ?? '';
    let group: string;
    if (name === '(garbage collector)' || name === '(idle)' || name === '(program)') {
      group = name;
    } else {
      const own = node === undefined ? undefined : groupOf(node.callFrame.url);
      const up = parent.get(id);
      group = own ?? (up === undefined ? 'Node core, no library frame' : groupOfNode(up));
      if (group === '(root)' || group === '(program)') group = 'Node core, no library frame';
    }
    groupCache.set(id, group);
    return group;
  };
  const times = new Map<string, number>();
  profile.samples.forEach((id, index) => {
    const group = groupOfNode(id);
    times.set(group, (times.get(group) ?? 0) + (profile.timeDeltas[index] ?? 0));
  });
  return times;
}

/** Groups below this share of busy time are added up in one line. */
const SMALL_SHARE = 0.005;

function main(): void {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    process.stderr.write('usage: node dist/bench/profile-groups.js <file.cpuprofile> ...\n');
    process.exit(2);
  }
  for (const file of files) {
    const times = groupProfile(JSON.parse(readFileSync(file, 'utf8')) as Profile);
    times.delete('(idle)');
    const busy = [...times.values()].reduce((sum, time) => sum + time, 0);
    process.stdout.write(
      `\n${file}: ${(busy / 1e6).toFixed(1)} s busy\n\n| group | share |\n|---|--:|\n`,
    );
    let small = 0;
    for (const [group, time] of [...times.entries()].sort((a, b) => b[1] - a[1])) {
      if (time / busy < SMALL_SHARE) small += time;
      else process.stdout.write(`| ${group} | ${((100 * time) / busy).toFixed(1)}% |\n`);
    }
    process.stdout.write(`| the rest, each under 0.5% | ${((100 * small) / busy).toFixed(1)}% |\n`);
  }
}

if (require.main === module) main();
