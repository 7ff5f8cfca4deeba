import type { AddressInfo } from 'node:net';
import express, { type ErrorRequestHandler } from 'express';
import type { KeyRecord } from '../../../lib';
import { generateKey } from '../../../lib/model/key-format';
import type { GatewayMetrics } from '../../../gateway/metrics';
import {
  type KeyWriter,
  type ReportLookups,
  secretScanning,
  type VerificationKeys,
} from '../../../gateway/secret-scanning';
import { captureLogs } from '../../helpers/logs';

/**
 * The endpoint's writes with a key store that has not yet reloaded past them, as an instance sees
 * a key between its write and the store's next reload: the key still looks in force. A key
 * reported again meanwhile must not be revoked or rolled again, nor logged or counted again, and a
 * report waiting on another's write must get the same answer for a database that fails.
 */

const SECRET = generateKey('secret', 'live');
const KEY = { id: 'key_leaked', accountId: 'acct_shop', revoked: false } as unknown as KeyRecord;

interface Harness {
  readonly url: string;
  readonly writes: string[];
  readonly leaked: () => number;
  readonly close: () => Promise<void>;
}

async function harness(action: 'revoke' | 'roll', write: () => Promise<void>): Promise<Harness> {
  const writes: string[] = [];
  let leaked = 0;
  const lookups: ReportLookups = {
    findBySecretKey: (token: string) => (token === SECRET ? KEY : undefined),
    findByPublishableKey: () => undefined,
  };
  const writer: KeyWriter = {
    revoke: async (id: unknown) => {
      writes.push(`revoke ${String(id)}`);
      await write();
      return {} as Awaited<ReturnType<KeyWriter['revoke']>>;
    },
    roll: async (id: unknown) => {
      writes.push(`roll ${String(id)}`);
      await write();
      return { key: { id: `key_new_${String(writes.length)}` } } as Awaited<
        ReturnType<KeyWriter['roll']>
      >;
    },
  };
  const metrics = {
    secretScanningRefused: () => undefined,
    secretScanningReport: () => undefined,
    secretKeyLeaked: () => {
      leaked += 1;
    },
  } as unknown as GatewayMetrics;
  const keys = { check: () => Promise.resolve('verified') } as unknown as VerificationKeys;
  const app = express();
  app.post(
    '/report',
    secretScanning({
      keys,
      lookups,
      writer,
      action,
      graceSeconds: 300,
      logger: captureLogs().logger,
      metrics,
      limiter: (_req, _res, next) => {
        next();
      },
      maxBodyBytes: 64 * 1024,
    }),
  );
  const errors: ErrorRequestHandler = (error: { status?: number }, _req, res, _next) => {
    res.status(error.status ?? 500).json({});
  };
  app.use(errors);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  return {
    url: `http://127.0.0.1:${String((server.address() as AddressInfo).port)}/report`,
    writes,
    leaked: () => leaked,
    close: () =>
      new Promise((resolve) => {
        server.close(() => {
          resolve();
        });
      }),
  };
}

const report = (url: string, tokens: readonly string[]): Promise<Response> =>
  fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'github-public-key-identifier': 'a'.repeat(64),
      'github-public-key-signature': 'c2lnbmVk',
    },
    body: JSON.stringify(tokens.map((token) => ({ token, type: 'tollgate_live_secret_key' }))),
  });

const labels = async (response: Response): Promise<unknown> =>
  ((await response.json()) as { label: string }[]).map((answer) => answer.label);

describe('the secret-scanning endpoint before its key store reloads', () => {
  it('revokes a key reported twice in one report, then again, once', async () => {
    const gateway = await harness('revoke', () => Promise.resolve());
    try {
      expect(await labels(await report(gateway.url, [SECRET, SECRET]))).toEqual([
        'true_positive',
        'true_positive',
      ]);
      expect(await labels(await report(gateway.url, [SECRET]))).toEqual(['false_positive']);
      expect(gateway.writes).toEqual(['revoke key_leaked']);
      expect(gateway.leaked()).toBe(1);
    } finally {
      await gateway.close();
    }
  });

  it('with roll: rolls a key reported twice in one report, then again, once', async () => {
    const gateway = await harness('roll', () => Promise.resolve());
    try {
      expect(await labels(await report(gateway.url, [SECRET, SECRET]))).toEqual([
        'true_positive',
        'true_positive',
      ]);
      expect(await labels(await report(gateway.url, [SECRET]))).toEqual(['true_positive']);
      expect(gateway.writes).toEqual(['roll key_leaked']);
      expect(gateway.leaked()).toBe(1);
    } finally {
      await gateway.close();
    }
  });

  it('answers 503 to a report waiting on another report whose write the database failed', async () => {
    let fail: (error: Error) => void = () => undefined;
    const gateway = await harness(
      'revoke',
      () =>
        new Promise<void>((_resolve, reject) => {
          fail = reject;
        }),
    );
    try {
      const first = report(gateway.url, [SECRET]);
      while (gateway.writes.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      const waiting = report(gateway.url, [SECRET]);
      await new Promise((resolve) => setTimeout(resolve, 50));
      fail(new Error('connection terminated unexpectedly'));
      expect((await first).status).toBe(503);
      expect((await waiting).status).toBe(503);
    } finally {
      await gateway.close();
    }
  });
});
