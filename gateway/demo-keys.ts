import { generateKey, KeyRing, type Role, ROLES, sha256 } from '../lib';

/** A demo account with one key pair per role, for running the gateway without a keys file. */

export interface DemoCredential {
  readonly keyId: string;
  readonly role: Role;
  readonly publishableKey: string;
  readonly secretKey: string;
}

export const DEMO_ACCOUNT_ID = 'acct_demo';

/**
 * One key pair per role, new unless `credentials` are given: the threads of one gateway serve the
 * pairs its main thread made.
 */
export function createDemoKeys(credentials: readonly DemoCredential[] = newDemoCredentials()): {
  ring: KeyRing;
  credentials: readonly DemoCredential[];
} {
  const ring = KeyRing.fromDocument(
    {
      accounts: [
        {
          id: DEMO_ACCOUNT_ID,
          keys: credentials.map((credential) => ({
            id: credential.keyId,
            publishableKey: credential.publishableKey,
            secretKeySha256: sha256(credential.secretKey).toString('hex'),
            role: credential.role,
          })),
        },
      ],
    },
    'demo keys',
  );
  return { ring, credentials };
}

function newDemoCredentials(): DemoCredential[] {
  return ROLES.map((role) => ({
    keyId: `key_demo_${role.replace('-', '')}`,
    role,
    publishableKey: generateKey('publishable', 'test'),
    secretKey: generateKey('secret', 'test'),
  }));
}

export function formatDemoCredentials(credentials: readonly DemoCredential[]): string {
  const lines = [
    '',
    `Demo account ${DEMO_ACCOUNT_ID} (generated for this process only; set TOLLGATE_KEYS_FILE for real keys):`,
  ];
  for (const credential of credentials) {
    lines.push(
      `  ${credential.role.padEnd(13)} key id ${credential.keyId}`,
      `      publishable ${credential.publishableKey}`,
      `      secret      ${credential.secretKey}`,
    );
  }
  lines.push('');
  return lines.join('\n');
}
