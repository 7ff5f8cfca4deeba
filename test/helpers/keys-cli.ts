import { distScript, type Finished, runNode } from './process';

/** The built key command (`dist/gateway/keys-cli.js`), what `tollgate-keys` runs. */
export const KEYS_CLI = distScript('gateway/keys-cli.js');

/** Runs the key command with `args`, `env` added to the test environment. */
export function runKeys(args: string[], env: Record<string, string> = {}): Promise<Finished> {
  return runNode(KEYS_CLI, args, env);
}

/** One line on stderr (`tollgate-keys: …` matching `pattern`), exit status 1, no stack trace. */
export function expectOneLineError(result: Finished, pattern: RegExp): void {
  expect({ code: result.code, stdout: result.stdout }).toEqual({ code: 1, stdout: '' });
  const lines = result.stderr.split('\n').filter((line) => line !== '');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^tollgate-keys: /);
  expect(lines[0]).toMatch(pattern);
  expect(result.stderr).not.toMatch(/\n\s+at /);
}
