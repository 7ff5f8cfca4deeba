#!/usr/bin/env node
import { ConfigurationError } from '../lib';
import { migrateDatabase, runOnDatabase } from './keys-cli/database-commands';
import { runOnFile } from './keys-cli/file-commands';
import { isCommand, parse, USAGE } from './keys-cli/options';
import { databaseFromEnv, scrub, targetOf } from './keys-cli/target';

/**
 * The key command, installed as `tollgate-keys` (in this repository `npm run keys -- …`). It
 * works on a keys file (`--file`, see keys-cli/file-commands.ts) or on the database
 * (`--database-url`, see keys-cli/database-commands.ts); keys-cli/target.ts says which. An error
 * is one line on stderr and exit status 1, never a stack trace, never a database password.
 */

async function main(argv: string[]): Promise<void> {
  const { positionals, values } = parse(argv);
  const command = positionals[0];
  if (values.help === true) {
    console.log(USAGE);
    return;
  }
  if (command === undefined) {
    throw new ConfigurationError(`a command is required\n${USAGE}`);
  }
  if (!isCommand(command)) {
    throw new ConfigurationError(`unknown command ${JSON.stringify(command)}\n${USAGE}`);
  }
  if (positionals.length > 1) {
    throw new ConfigurationError(
      `unexpected argument ${JSON.stringify(positionals[1])} (tollgate-keys --help for usage)`,
    );
  }
  const target = targetOf(command, values, process.env);
  if (target.kind === 'file') await runOnFile(command, values, target.file);
  else if (command === 'migrate') await migrateDatabase(target.url, target.shown);
  else await runOnDatabase(command, values, target.url, target.shown);
}

/** Every value that may hold a database password, to scrub from any message. */
function databaseUrls(argv: string[]): string[] {
  const urls = [process.env.TOLLGATE_DATABASE_URL ?? ''];
  try {
    urls.push(databaseFromEnv(process.env)?.url ?? '');
  } catch {
    // an unreadable file holds no password to scrub
  }
  argv.forEach((arg, index) => {
    if (arg === '--database-url') urls.push(argv[index + 1] ?? '');
    if (arg.startsWith('--database-url=')) urls.push(arg.slice('--database-url='.length));
  });
  return urls;
}

const argv = process.argv.slice(2);
main(argv).then(
  () => {
    process.exitCode = 0;
  },
  (error: unknown) => {
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(`tollgate-keys: ${scrub(message, databaseUrls(argv))}\n`);
    process.exitCode = 1;
  },
);
