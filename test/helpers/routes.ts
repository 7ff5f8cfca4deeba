import type { TestKey } from './fixtures';
import type { SendResult, TestGateway } from './gateway';

/**
 * Ways a client presents a credential, and the token exchange, for the
 * integration suites.
 */

/** How a credential travels: Bearer secret key, Bearer token, publishable key in header or body. */
export const PRESENTATIONS = ['secret', 'token', 'publishable-header', 'publishable-body'] as const;
export type Presentation = (typeof PRESENTATIONS)[number];

export const DEFAULT_PUBLIC_KEY_HEADER = 'X-Service-Public-API-Key';

/** The `X-Gateway-Credential` value the upstream must see for a presentation. */
export function credentialKindOf(presentation: Presentation): 'secret' | 'token' | 'publishable' {
  return presentation === 'publishable-header' || presentation === 'publishable-body'
    ? 'publishable'
    : presentation;
}

export interface Presented {
  readonly headers: Record<string, string>;
  /** Extra JSON text to put first in the body object (`"public_key": "…"`), or `undefined`. */
  readonly bodyField: string | undefined;
}

export function present(
  presentation: Presentation,
  key: TestKey,
  token: string,
  publicKeyHeader = DEFAULT_PUBLIC_KEY_HEADER,
): Presented {
  switch (presentation) {
    case 'secret':
      return { headers: { authorization: `Bearer ${key.secretKey}` }, bodyField: undefined };
    case 'token':
      return { headers: { authorization: `Bearer ${token}` }, bodyField: undefined };
    case 'publishable-header':
      return { headers: { [publicKeyHeader]: key.publishableKey }, bodyField: undefined };
    case 'publishable-body':
      return { headers: {}, bodyField: `"public_key" :  ${JSON.stringify(key.publishableKey)}` };
  }
}

/**
 * A JSON body written with odd spacing and number formatting, so that a proxy which re-serialised
 * it would be caught: `{ "invoice_id" :  "inv_1",\n  "amount":10.50 }` (with `bodyField` first).
 */
export function oddlySpacedBody(
  bodyField: string | undefined,
  withPayload: boolean,
): string | undefined {
  const fields = [
    bodyField,
    withPayload ? '"invoice_id" :  "inv_1",\n  "amount":10.50 , "otp":"123456"' : undefined,
  ].filter((field): field is string => field !== undefined);
  return fields.length === 0 ? undefined : `{ ${fields.join(' ,\n ')} }`;
}

/** Exchanges `key`'s pair for a token over HTTP (from `from`), failing loudly if refused. */
export async function exchangeToken(
  gateway: TestGateway,
  key: TestKey,
  from?: string,
): Promise<string> {
  const result = await exchange(gateway, key, from);
  if (result.status !== 200 || typeof result.body?.token !== 'string') {
    throw new Error(`token exchange for ${key.id} answered ${result.status}: ${result.text}`);
  }
  return result.body.token;
}

export function exchange(gateway: TestGateway, key: TestKey, from?: string): Promise<SendResult> {
  return gateway.send({
    method: 'POST',
    path: '/api/v1/auth/generate-token/',
    body: { api_key: key.publishableKey, api_secret: key.secretKey },
    ...(from === undefined ? {} : { from }),
  });
}

export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, ms));
