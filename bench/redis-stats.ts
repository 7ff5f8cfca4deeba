import net from 'node:net';

/**
 * Commands a Redis server has executed, from `INFO commandstats` (`cmdstat_<name>:calls=<n>,...`).
 * The server is the bench's own, so every command counted is the measured process's, except the
 * INFO calls made here, left out.
 */

export type CommandCounts = ReadonlyMap<string, number>;

function send(port: number, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let reply = '';
    socket.setTimeout(2000);
    socket.once('connect', () => socket.write(`${command}\r\n`));
    socket.on('data', (chunk: Buffer) => {
      reply += chunk.toString('utf8');
      // A bulk string: `$<length>\r\n<body>\r\n`.
      const header = /^\$(\d+)\r\n/.exec(reply);
      if (header?.[1] !== undefined && reply.length >= header[0].length + Number(header[1])) {
        socket.destroy();
        resolve(reply.slice(header[0].length, header[0].length + Number(header[1])));
      }
    });
    socket.once('error', reject);
    socket.once('timeout', () => {
      socket.destroy();
      reject(new Error(`redis on port ${port} did not answer ${command}`));
    });
  });
}

export async function commandCounts(port: number): Promise<CommandCounts> {
  const info = await send(port, 'INFO commandstats');
  const counts = new Map<string, number>();
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    const [, name, calls] = match;
    if (name !== undefined && calls !== undefined && name !== 'info') {
      counts.set(name, Number(calls));
    }
  }
  return counts;
}

/**
 * Commands that run a script. commandstats also counts every command a script calls (an EVALSHA
 * that calls INCR and PTTL counts 3), and cannot tell those from commands clients send; these are
 * the round trips that carry a limit.
 */
const SCRIPT_COMMANDS: ReadonlySet<string> = new Set([
  'eval',
  'evalsha',
  'eval_ro',
  'evalsha_ro',
  'fcall',
  'fcall_ro',
]);

/** Commands run between two snapshots, by name, their total, and how many ran a script. */
export function commandsBetween(
  before: CommandCounts,
  after: CommandCounts,
): { total: number; scripts: number; byName: Map<string, number> } {
  const byName = new Map<string, number>();
  let total = 0;
  let scripts = 0;
  for (const [name, calls] of after) {
    const delta = calls - (before.get(name) ?? 0);
    if (delta > 0) {
      byName.set(name, delta);
      total += delta;
      if (SCRIPT_COMMANDS.has(name)) scripts += delta;
    }
  }
  return { total, scripts, byName };
}
