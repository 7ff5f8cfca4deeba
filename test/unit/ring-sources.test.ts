import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKey } from '../../lib/model/key-format';
import { sha256 } from '../../lib/keys/key-store';
import { buildRingHere, LARGE_FILE_BYTES } from '../../lib/keys/ring-sources';

/**
 * A large rebuild made while requests are served yields to them (the ring worker lowers its
 * thread's priority when the build calls `large`); small builds and first loads never do.
 */
describe('buildRingHere: which builds are large', () => {
  let directory: string;
  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'tollgate-ring-sources-'));
  });
  afterAll(async () => {
    await rm(directory, { recursive: true, force: true });
  });

  const document = JSON.stringify({
    accounts: [
      {
        id: 'acct_one',
        keys: [
          {
            id: 'key_one',
            publishableKey: generateKey('publishable'),
            secretKeySha256: sha256(generateKey('secret')).toString('hex'),
          },
        ],
      },
    ],
  });

  /** A valid keys file of `bytes` bytes: the document, then white space. */
  async function keysFile(name: string, bytes: number): Promise<string> {
    const path = join(directory, name);
    await writeFile(path, document.padEnd(bytes, ' '));
    return path;
  }

  it.each([
    ['a large file, reloaded while serving, yields', LARGE_FILE_BYTES + 1, true, 1],
    ['a large file, first load, does not yield', LARGE_FILE_BYTES + 1, false, 0],
    ['a small file, reloaded while serving, does not yield', LARGE_FILE_BYTES, true, 0],
  ])('%s', async (_what, bytes, background, calls) => {
    const large = jest.fn();
    const built = await buildRingHere(
      { kind: 'file', path: await keysFile(`keys-${bytes}-${background}.json`, bytes), background },
      { large },
    );
    expect(built.table.keyCount).toBe(1);
    expect(large).toHaveBeenCalledTimes(calls);
  });
});
