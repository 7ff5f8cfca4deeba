import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { postgresAvailable } from './postgres';

/**
 * The browser tests drive Debian's `chromium` (apt-get install chromium) with playwright-core:
 * nothing is downloaded, the test looks for the browser on `PATH`. Where there is none the suites
 * are skipped with a loud notice, unless `REQUIRE_BROWSER=1` (as `.ci/run` sets), which makes them
 * fail instead.
 */

const NAMES = ['chromium', 'chromium-browser', 'google-chrome-stable', 'google-chrome'];

/** The first Chromium-family browser on `PATH`, or `undefined`. */
export function chromiumPath(): string | undefined {
  for (const folder of (process.env.PATH ?? '').split(path.delimiter)) {
    if (folder === '') continue;
    for (const name of NAMES) {
      const candidate = path.join(folder, name);
      try {
        accessSync(candidate, constants.X_OK);
        return candidate;
      } catch {
        // not here
      }
    }
  }
  return undefined;
}

function browserAvailable(): boolean {
  const available = chromiumPath() !== undefined;
  if (!available && process.env.REQUIRE_BROWSER !== '1') {
    process.stderr.write(
      '\n*** Browser tests SKIPPED: no chromium on PATH (apt-get install chromium; REQUIRE_BROWSER=1 makes this a failure) ***\n\n',
    );
  }
  return available || process.env.REQUIRE_BROWSER === '1';
}

/** `describe` for suites that need a browser and PostgreSQL; skipped loudly without them. */
export const describeWithBrowser: jest.Describe =
  browserAvailable() && postgresAvailable() ? describe : describe.skip;

/** The browser to launch; throws, naming the fix, when `REQUIRE_BROWSER=1` and there is none. */
export function requireChromium(): string {
  const found = chromiumPath();
  if (found === undefined) {
    throw new Error('REQUIRE_BROWSER=1 but no chromium is on PATH: apt-get install chromium');
  }
  return found;
}
