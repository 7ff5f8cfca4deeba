import { httpRequest } from './processes';
import type { BenchAccount } from './fixture';
import { FORWARD_AUTH_HEADERS, FORWARD_AUTH_PATH, WALLETS_PATH } from './labels';

/** The answers a case checks before it is measured. */

/** One real token exchange, then wallets with that token and with the secret key: all 200. */
export async function sanityCheck(gatewayUrl: string, account: BenchAccount): Promise<void> {
  const exchange = await httpRequest(`${gatewayUrl}/api/v1/auth/generate-token/`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ api_key: account.publishableKey, api_secret: account.secretKey }),
  });
  if (exchange.status !== 200) throw new Error(`token exchange answered ${exchange.status}`);
  const { token } = JSON.parse(exchange.body) as { token: string };
  for (const credential of [token, account.secretKey]) {
    const reply = await httpRequest(`${gatewayUrl}${WALLETS_PATH}`, {
      headers: { authorization: `Bearer ${credential}` },
    });
    if (reply.status !== 200) throw new Error(`wallets answered ${reply.status}: ${reply.body}`);
  }
}

export async function walletsWith(gatewayUrl: string, credential: string): Promise<number> {
  const reply = await httpRequest(`${gatewayUrl}${WALLETS_PATH}`, {
    headers: { authorization: `Bearer ${credential}` },
  });
  return reply.status;
}

/** A wrong key is answered 401 while the budget lasts. Spends one failure. */
export async function wrongKeyCheck(gatewayUrl: string, wrongKey: string): Promise<void> {
  const status = await walletsWith(gatewayUrl, wrongKey);
  if (status !== 401) throw new Error(`a wrong secret key answered ${status}, not 401`);
}

/** Spends the whole budget (`limit` answers 401), then checks that the next attempt gets 429. */
export async function spendBudget(
  gatewayUrl: string,
  wrongKey: string,
  limit: number,
): Promise<void> {
  for (let attempt = 1; attempt <= limit; attempt++) {
    const status = await walletsWith(gatewayUrl, wrongKey);
    if (status !== 401) {
      throw new Error(`wrong secret key ${attempt} of a budget of ${limit} answered ${status}`);
    }
  }
  const status = await walletsWith(gatewayUrl, wrongKey);
  if (status !== 429) throw new Error(`with the budget spent a wrong key answered ${status}`);
}

/** The forward-auth endpoint allows the first account's secret key: 200, empty body. */
export async function forwardAuthCheck(gatewayUrl: string, account: BenchAccount): Promise<void> {
  const reply = await httpRequest(`${gatewayUrl}${FORWARD_AUTH_PATH}`, {
    headers: { ...FORWARD_AUTH_HEADERS, authorization: `Bearer ${account.secretKey}` },
  });
  if (reply.status !== 200 || reply.body !== '') {
    throw new Error(`forward-auth answered ${reply.status}: ${reply.body}`);
  }
}
