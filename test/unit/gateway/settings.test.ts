import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { ConfigurationError } from '../../../lib';
import { loadConfig, NEIGHBOUR_SETTINGS, SETTINGS } from '../../../gateway/config';

/**
 * The gateway's `TOLLGATE_*` settings are one list: every name its code reads is in it, every name
 * in it is documented, and any other `TOLLGATE_*` variable stops the gateway naming the nearest.
 */

const ROOT = path.join(__dirname, '..', '..', '..');

function sourcesUnder(folder: string): string[] {
  return readdirSync(path.join(ROOT, folder), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts'))
    .map((file) => readFileSync(path.join(ROOT, folder, file), 'utf8'));
}

/** The `TOLLGATE_*` names quoted as strings in the gateway's code. */
function namesRead(): Set<string> {
  const names = new Set<string>();
  for (const source of sourcesUnder('gateway')) {
    for (const match of source.matchAll(/'(TOLLGATE_[A-Z0-9_]+)'/g)) names.add(match[1] ?? '');
  }
  return names;
}

describe('the gateway settings', () => {
  it('lists every TOLLGATE_* name the gateway reads (or lets through for its neighbours)', () => {
    const read = [...namesRead()];
    expect(read.length).toBeGreaterThan(20);
    expect(
      read.filter((name) => !SETTINGS.includes(name) && !NEIGHBOUR_SETTINGS.includes(name)),
    ).toEqual([]);
  });

  it('documents every setting in the configuration guide', () => {
    const guide = readFileSync(path.join(ROOT, 'docs', 'configuration.md'), 'utf8');
    expect(SETTINGS.filter((name) => !guide.includes(`\`${name}\``))).toEqual([]);
  });

  it('lets through the names the compose file and the Caddy snippet read', () => {
    const neighbours = [
      readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8'),
      readFileSync(path.join(ROOT, 'deploy', 'caddy', 'tollgate.caddy'), 'utf8'),
    ].join('\n');
    expect(NEIGHBOUR_SETTINGS.filter((name) => !neighbours.includes(name))).toEqual([]);
    for (const name of NEIGHBOUR_SETTINGS) {
      expect(() => loadConfig({ [name]: '8080' })).not.toThrow();
    }
  });

  it.each([
    ['TOLLGATE_KEY_FILE', 'TOLLGATE_KEYS_FILE'],
    ['TOLLGATE_TOKEN_SECRETS', 'TOLLGATE_TOKEN_SECRET'],
    ['TOLLGATE_TRUST_PROXI', 'TOLLGATE_TRUST_PROXY'],
    ['TOLLGATE_Admin_Port', 'TOLLGATE_ADMIN_PORT'],
    ['TOLLGATE_IDEMPOTENCY_TTL', 'TOLLGATE_IDEMPOTENCY_TTL_SECONDS'],
  ])('refuses %s, naming %s', (name, nearest) => {
    const attempt = (): unknown => loadConfig({ [name]: '1' });
    expect(attempt).toThrow(ConfigurationError);
    expect(attempt).toThrow(`${name} is not a Tollgate setting (did you mean ${nearest}?)`);
  });

  it('names the first unknown variable in alphabetical order, whatever the order of the environment', () => {
    expect(() => loadConfig({ TOLLGATE_ZZZ: '1', TOLLGATE_AAA: '1' })).toThrow(
      /^TOLLGATE_AAA is not a Tollgate setting/,
    );
  });

  it('ignores variables outside its prefix', () => {
    expect(() => loadConfig({ TOLLGATEKEYS: '1', MY_TOLLGATE_FILE: '1' })).not.toThrow();
  });
});
