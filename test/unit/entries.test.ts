import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The shape of the package's public face: each runtime name (function, class, constant) in one
 * entry only, and few of them in all, so the entries stay one purpose each. The API reports
 * (api/*.api.md) show every name; this keeps the count from growing unseen.
 */

const ROOT = join(__dirname, '../..');
/** At most this many runtime names over every entry together. */
const MAX_RUNTIME_NAMES = 56;

/** Entry name (as users import it) to its source file, from package.json `exports`. */
function entries(): Map<string, string> {
  const manifest = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
    name: string;
    exports: Record<string, string | { types?: string }>;
  };
  const found = new Map<string, string>();
  for (const [subpath, target] of Object.entries(manifest.exports)) {
    const types = typeof target === 'string' ? undefined : target.types;
    const source = types?.match(/^\.\/dist\/(lib\/.+)\.d\.ts$/)?.[1];
    if (source === undefined) continue;
    found.set(subpath === '.' ? manifest.name : `${manifest.name}${subpath.slice(1)}`, source);
  }
  return found;
}

function runtimeNames(): Map<string, string[]> {
  const names = new Map<string, string[]>();
  for (const [entry, source] of entries()) {
    const loaded = jest.requireActual<Record<string, unknown>>(join(ROOT, source));
    names.set(entry, Object.keys(loaded).sort());
  }
  return names;
}

describe("the package's entries", () => {
  const names = runtimeNames();

  it('are the six of package.json, each with something in it', () => {
    expect([...names.keys()]).toEqual([
      'tollgate',
      'tollgate/core',
      'tollgate/express',
      'tollgate/forward-auth',
      'tollgate/postgres',
      'tollgate/redis',
    ]);
    for (const list of names.values()) expect(list.length).toBeGreaterThan(0);
  });

  it('export each runtime name from one entry only', () => {
    const twice: string[] = [];
    const seen = new Map<string, string>();
    for (const [entry, list] of names) {
      for (const name of list) {
        const first = seen.get(name);
        if (first === undefined) seen.set(name, entry);
        else twice.push(`${name} (${first} and ${entry})`);
      }
    }
    expect(twice).toEqual([]);
  });

  it(`export at most ${MAX_RUNTIME_NAMES} runtime names in all`, () => {
    const total = [...names.values()].reduce((sum, list) => sum + list.length, 0);
    expect(total).toBeLessThanOrEqual(MAX_RUNTIME_NAMES);
  });

  it('keep the error subclasses and the tracing internals off the public face', () => {
    const all = [...names.values()].flat();
    for (const name of [
      'RateLimitedError',
      'InvalidRequestError',
      'AuthenticationError',
      'UpstreamError',
      'NotReadyError',
      'ForbiddenOriginError',
      'startRequestSpan',
      'TRACER_NAME',
      'IDENTITY_HEADERS',
    ]) {
      expect(all).not.toContain(name);
    }
    expect(names.get('tollgate')).toEqual(expect.arrayContaining(['TollgateError', 'ERROR_CODES']));
    expect(names.get('tollgate/postgres')).toContain('PgKeyStore');
    expect(names.get('tollgate/redis')).toContain('createLimiterRedis');
  });

  it('agree with the API reports: every runtime name is in its entry report', () => {
    for (const [entry, list] of names) {
      const report = readFileSync(join(ROOT, 'api', `${entry.replace('/', '-')}.api.md`), 'utf8');
      const reported = [
        ...report.matchAll(/^export (?:declare )?(?:abstract )?(?:function|class|const) (\w+)/gm),
      ].map((match) => match[1]);
      // A class exported as a type only (`RedisHealth`) is in the report, not in the module.
      expect(reported).toEqual(expect.arrayContaining(list));
    }
  });
});
