import { createHash } from 'node:crypto';
import {
  isNoScriptError,
  type RedisCommandClient,
  redisCommandFn,
  RedisUnavailableError,
  scriptSha1,
} from '../../../lib/rate-limit/redis-commands';

const SCRIPT = `local totalHits = redis.call("INCR", KEYS[1])
local timeToExpire = redis.call("PTTL", KEYS[1])
return { totalHits, timeToExpire }`;
const SHA = createHash('sha1').update(SCRIPT).digest('hex');

/** A RedisCommandClient double: records every command and answers from a queue of replies. */
class FakeClient implements RedisCommandClient {
  status = 'ready';
  readonly calls: string[][] = [];
  private readonly replies: unknown[] = [];

  answer(...replies: unknown[]): this {
    this.replies.push(...replies);
    return this;
  }

  call(command: string, ...args: string[]): Promise<unknown> {
    this.calls.push([command, ...args]);
    const reply = this.replies.shift();
    return reply instanceof Error ? Promise.reject(reply) : Promise.resolve(reply);
  }
}

const noScript = (): Error => new Error('NOSCRIPT No matching script. Please use EVAL.');

async function failure(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => new Error('the command succeeded'),
    (error: unknown) => error,
  );
}

describe('redisCommandFn', () => {
  it.each([
    ['SCRIPT', 'LOAD'],
    ['script', 'load'],
    ['Script', 'Load'],
  ])('answers %s %s locally with the SHA-1 of the script text', async (command, subcommand) => {
    const client = new FakeClient();
    const send = redisCommandFn(client);
    await expect(send(command, subcommand, SCRIPT)).resolves.toBe(SHA);
    expect(scriptSha1(SCRIPT)).toBe(SHA);
    expect(client.calls).toEqual([]);
  });

  it('answers SCRIPT LOAD even while the client is not connected', async () => {
    const client = new FakeClient();
    client.status = 'connecting';
    await expect(redisCommandFn(client)('SCRIPT', 'LOAD', SCRIPT)).resolves.toBe(SHA);
    expect(client.calls).toEqual([]);
  });

  it('sends EVALSHA as it is when the script is cached', async () => {
    const client = new FakeClient().answer([1, 60_000]);
    const send = redisCommandFn(client);
    await send('SCRIPT', 'LOAD', SCRIPT);
    await expect(send('EVALSHA', SHA, '1', 'rl:key', '0', '60000')).resolves.toEqual([1, 60_000]);
    expect(client.calls).toEqual([['EVALSHA', SHA, '1', 'rl:key', '0', '60000']]);
  });

  it('runs EVAL with the script text, once, when EVALSHA answers NOSCRIPT', async () => {
    const client = new FakeClient().answer(noScript(), [1, 60_000]);
    const send = redisCommandFn(client);
    await send('SCRIPT', 'LOAD', SCRIPT);
    await expect(send('EVALSHA', SHA, '1', 'rl:key', '0', '60000')).resolves.toEqual([1, 60_000]);
    expect(client.calls).toEqual([
      ['EVALSHA', SHA, '1', 'rl:key', '0', '60000'],
      ['EVAL', SCRIPT, '1', 'rl:key', '0', '60000'],
    ]);
  });

  it('does the same for evalsha in lower case', async () => {
    const client = new FakeClient().answer(noScript(), 7);
    const send = redisCommandFn(client);
    await send('script', 'load', SCRIPT);
    await expect(send('evalsha', SHA, '1', 'k')).resolves.toBe(7);
    expect(client.calls[1]).toEqual(['EVAL', SCRIPT, '1', 'k']);
  });

  it('rethrows a failure of the EVAL fallback without trying again', async () => {
    const timeout = new Error('Command timed out');
    const client = new FakeClient().answer(noScript(), timeout, [1, 1]);
    const send = redisCommandFn(client);
    await send('SCRIPT', 'LOAD', SCRIPT);
    await expect(failure(send('EVALSHA', SHA, '1', 'k'))).resolves.toBe(timeout);
    expect(client.calls.map(([command]) => command)).toEqual(['EVALSHA', 'EVAL']);
  });

  it('rethrows NOSCRIPT for a script it was never given', async () => {
    const error = noScript();
    const client = new FakeClient().answer(error);
    const unknownSha = 'f'.repeat(40);
    await expect(failure(redisCommandFn(client)('EVALSHA', unknownSha, '1', 'k'))).resolves.toBe(
      error,
    );
    expect(client.calls).toEqual([['EVALSHA', unknownSha, '1', 'k']]);
  });

  it.each([
    ['a timeout', new Error('Command timed out')],
    ['a read-only replica', new Error('READONLY You can not write against a read only replica.')],
    ['a script error', new Error('ERR Error running script (call to f_abc): @user_script:1: oops')],
    [
      'a lost connection',
      Object.assign(new Error('Connection is closed.'), { code: 'ECONNRESET' }),
    ],
  ])(
    'rethrows %s from EVALSHA and never replays it (the increment may have run)',
    async (_what, error) => {
      const client = new FakeClient().answer(error, [1, 1]);
      const send = redisCommandFn(client);
      await send('SCRIPT', 'LOAD', SCRIPT);
      await expect(failure(send('EVALSHA', SHA, '1', 'k'))).resolves.toBe(error);
      expect(client.calls).toHaveLength(1);
    },
  );

  it('rethrows a NOSCRIPT-looking failure of another command', async () => {
    const error = noScript();
    const client = new FakeClient().answer(error);
    const send = redisCommandFn(client);
    await send('SCRIPT', 'LOAD', SCRIPT);
    await expect(failure(send('DECR', 'k'))).resolves.toBe(error);
    expect(client.calls).toEqual([['DECR', 'k']]);
  });

  it.each([['connecting'], ['reconnecting'], ['connect'], ['wait'], ['close'], ['end']])(
    'throws RedisUnavailableError without sending anything while the client is %s',
    async (status) => {
      const client = new FakeClient().answer([1, 1]);
      client.status = status;
      const error = await failure(redisCommandFn(client)('EVALSHA', SHA, '1', 'k'));
      expect(error).toBeInstanceOf(RedisUnavailableError);
      expect(error).toMatchObject({ code: 'REDIS_NOT_READY' });
      expect(client.calls).toEqual([]);
    },
  );

  it('does not send the EVAL fallback when the client dropped after NOSCRIPT', async () => {
    const client = new FakeClient();
    const send = redisCommandFn(client);
    await send('SCRIPT', 'LOAD', SCRIPT);
    jest.spyOn(client, 'call').mockImplementationOnce((command: string, ...args: string[]) => {
      client.calls.push([command, ...args]);
      client.status = 'reconnecting';
      return Promise.reject(noScript());
    });
    await expect(failure(send('EVALSHA', SHA, '1', 'k'))).resolves.toBeInstanceOf(
      RedisUnavailableError,
    );
    expect(client.calls).toEqual([['EVALSHA', SHA, '1', 'k']]);
  });
});

describe('isNoScriptError', () => {
  it.each([
    [new Error('NOSCRIPT No matching script. Please use EVAL.'), true],
    [new Error('NOSCRIPT'), true],
    [new Error('ERR NOSCRIPT'), false],
    [new Error('NOSCRIPTS are fine'), false],
    ['NOSCRIPT No matching script', false],
    [undefined, false],
  ])('%p: %p', (error, expected) => {
    expect(isNoScriptError(error)).toBe(expected);
  });
});
