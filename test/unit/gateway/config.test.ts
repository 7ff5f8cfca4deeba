import { DEFAULT_LIMITS, type GatewayConfig, loadConfig } from '../../../gateway/config';
import { ConfigurationError } from '../../../lib/errors';

const SECRET_32 = 'x'.repeat(32);

function configError(env: Record<string, string>): ConfigurationError {
  try {
    loadConfig(env);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigurationError);
    return error as ConfigurationError;
  }
  throw new Error(`${JSON.stringify(env)} was accepted`);
}

describe('loadConfig defaults', () => {
  const config: GatewayConfig = loadConfig({});

  it.each([
    ['PORT', 'port', 8080],
    ['HOST', 'host', '127.0.0.1'],
    ['REDIS_URL (unset: in-memory)', 'redis', undefined],
    ['TOLLGATE_KEYS_FILE (unset: demo keys)', 'keysFile', undefined],
    ['TOLLGATE_TOKEN_SECRET (unset: random per process)', 'tokenSecret', undefined],
    ['TOLLGATE_TOKEN_TTL_SECONDS', 'tokenTtlSeconds', 1800],
    ['TOLLGATE_TRUST_PROXY (unset: no proxy trusted)', 'trustProxy', false],
    ['TOLLGATE_UPSTREAM_URL (unset: bundled stub)', 'upstreamUrl', undefined],
    ['TOLLGATE_PUBLIC_KEY_HEADER', 'publicKeyHeader', 'X-Service-Public-API-Key'],
    ['LOG_LEVEL', 'logLevel', 'info'],
  ] as [string, keyof GatewayConfig, unknown][])(
    '%s defaults to %p',
    (_variable, field, expected) => {
      expect(config[field]).toEqual(expected);
    },
  );

  it('is not production without NODE_ENV=production', () => {
    expect(config.production).toBe(false);
  });

  it('uses the documented default limits', () => {
    expect(config.limits).toEqual(DEFAULT_LIMITS);
    expect(config.limits).toMatchObject({
      payments: 1500,
      authenticated: 100,
      checkoutCreate: 30,
      checkoutRead: 45,
      windowMs: 60_000,
    });
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ PORT: '', LOG_LEVEL: '', TOLLGATE_TRUST_PROXY: '' })).toEqual(config);
  });
});

describe('loadConfig reads valid values', () => {
  it.each([
    [{ PORT: '0' }, 'port', 0],
    [{ PORT: '65535' }, 'port', 65535],
    [{ HOST: '::' }, 'host', '::'],
    [{ TOLLGATE_TOKEN_SECRET: SECRET_32 }, 'tokenSecret', SECRET_32],
    [{ TOLLGATE_TOKEN_TTL_SECONDS: '60' }, 'tokenTtlSeconds', 60],
    [{ TOLLGATE_TRUST_PROXY: '1' }, 'trustProxy', 1],
    [{ TOLLGATE_TRUST_PROXY: 'loopback' }, 'trustProxy', ['loopback']],
    [
      { TOLLGATE_TRUST_PROXY: '10.0.0.0/8, 192.168.1.1' },
      'trustProxy',
      ['10.0.0.0/8', '192.168.1.1'],
    ],
    [
      { TOLLGATE_TRUST_PROXY: 'loopback,uniquelocal,2001:db8::/32' },
      'trustProxy',
      ['loopback', 'uniquelocal', '2001:db8::/32'],
    ],
    [{ TOLLGATE_UPSTREAM_URL: 'http://127.0.0.1:9000/' }, 'upstreamUrl', 'http://127.0.0.1:9000'],
    [
      { TOLLGATE_UPSTREAM_URL: 'https://payments.internal/base' },
      'upstreamUrl',
      'https://payments.internal/base',
    ],
    [{ TOLLGATE_PUBLIC_KEY_HEADER: 'X-Acme-Public-Key' }, 'publicKeyHeader', 'X-Acme-Public-Key'],
    [{ LOG_LEVEL: 'warn' }, 'logLevel', 'warn'],
    [
      { REDIS_URL: 'redis://127.0.0.1:6379/2' },
      'redis',
      { kind: 'url', url: 'redis://127.0.0.1:6379/2' },
    ],
    [
      { REDIS_CLUSTER_NODES: 'r1:7000, r2:7001' },
      'redis',
      { kind: 'cluster', nodes: ['r1:7000', 'r2:7001'] },
    ],
    [
      { REDIS_SENTINELS: 's1:26379,s2:26379', REDIS_SENTINEL_NAME: 'mymaster' },
      'redis',
      { kind: 'sentinel', sentinels: ['s1:26379', 's2:26379'], name: 'mymaster' },
    ],
    [
      {
        NODE_ENV: 'production',
        TOLLGATE_TOKEN_SECRET: SECRET_32,
        TOLLGATE_KEYS_FILE: '/etc/tollgate/keys.json',
      },
      'production',
      true,
    ],
  ] as [Record<string, string>, keyof GatewayConfig, unknown][])(
    '%p gives %s = %p',
    (env, field, expected) => {
      expect(loadConfig(env)[field]).toEqual(expected);
    },
  );
});

describe('loadConfig refuses invalid values, naming the variable first', () => {
  it.each([
    ['PORT', { PORT: 'abc' }],
    ['PORT', { PORT: '70000' }],
    ['PORT', { PORT: '-1' }],
    ['PORT', { PORT: '80.5' }],
    ['PORT', { PORT: ' 8080' }],
    ['TOLLGATE_TOKEN_SECRET', { TOLLGATE_TOKEN_SECRET: 'x'.repeat(31) }],
    ['TOLLGATE_TOKEN_SECRET', { NODE_ENV: 'production' }],
    [
      'TOLLGATE_TOKEN_SECRET',
      { NODE_ENV: 'production', TOLLGATE_TOKEN_SECRET: '', TOLLGATE_KEYS_FILE: '/k.json' },
    ],
    ['TOLLGATE_KEYS_FILE', { NODE_ENV: 'production', TOLLGATE_TOKEN_SECRET: SECRET_32 }],
    ['TOLLGATE_TOKEN_TTL_SECONDS', { TOLLGATE_TOKEN_TTL_SECONDS: 'abc' }],
    ['TOLLGATE_TOKEN_TTL_SECONDS', { TOLLGATE_TOKEN_TTL_SECONDS: '0' }],
    ['TOLLGATE_TOKEN_TTL_SECONDS', { TOLLGATE_TOKEN_TTL_SECONDS: '1.5' }],
    ['TOLLGATE_TOKEN_TTL_SECONDS', { TOLLGATE_TOKEN_TTL_SECONDS: '86401' }],
    ['TOLLGATE_TRUST_PROXY', { TOLLGATE_TRUST_PROXY: 'true' }],
    ['TOLLGATE_TRUST_PROXY', { TOLLGATE_TRUST_PROXY: 'TRUE' }],
    ['TOLLGATE_TRUST_PROXY', { TOLLGATE_TRUST_PROXY: 'yes' }],
    ['TOLLGATE_TRUST_PROXY', { TOLLGATE_TRUST_PROXY: 'garbage' }],
    ['TOLLGATE_TRUST_PROXY', { TOLLGATE_TRUST_PROXY: '10.0.0.0/33' }],
    ['TOLLGATE_TRUST_PROXY', { TOLLGATE_TRUST_PROXY: '10.0.0.0/8,' }],
    ['TOLLGATE_TRUST_PROXY', { TOLLGATE_TRUST_PROXY: '010.0.0.1' }],
    ['TOLLGATE_TRUST_PROXY', { TOLLGATE_TRUST_PROXY: '0.0.0.0/0' }],
    ['TOLLGATE_TRUST_PROXY', { TOLLGATE_TRUST_PROXY: '::/0' }],
    ['TOLLGATE_UPSTREAM_URL', { TOLLGATE_UPSTREAM_URL: 'ftp://x' }],
    ['TOLLGATE_UPSTREAM_URL', { TOLLGATE_UPSTREAM_URL: 'http://u:p@host' }],
    ['TOLLGATE_UPSTREAM_URL', { TOLLGATE_UPSTREAM_URL: 'not a url' }],
    ['TOLLGATE_UPSTREAM_URL', { TOLLGATE_UPSTREAM_URL: 'http://host/?debug=1' }],
    ['TOLLGATE_PUBLIC_KEY_HEADER', { TOLLGATE_PUBLIC_KEY_HEADER: 'Authorization' }],
    ['TOLLGATE_PUBLIC_KEY_HEADER', { TOLLGATE_PUBLIC_KEY_HEADER: 'authorization' }],
    ['TOLLGATE_PUBLIC_KEY_HEADER', { TOLLGATE_PUBLIC_KEY_HEADER: 'bad header' }],
    ['TOLLGATE_PUBLIC_KEY_HEADER', { TOLLGATE_PUBLIC_KEY_HEADER: 'X-Gateway-Key-Id' }],
    ['LOG_LEVEL', { LOG_LEVEL: 'loud' }],
    ['LOG_LEVEL', { LOG_LEVEL: 'INFO' }],
    ['REDIS_URL', { REDIS_URL: 'localhost:6379' }],
    ['REDIS_URL', { REDIS_URL: 'http://localhost:6379' }],
    ['REDIS_URL', { REDIS_URL: 'redis://127.0.0.1:6379', REDIS_CLUSTER_NODES: 'r1:7000' }],
    [
      'REDIS_URL',
      { REDIS_CLUSTER_NODES: 'r1:7000', REDIS_SENTINELS: 's1:26379', REDIS_SENTINEL_NAME: 'm' },
    ],
    ['REDIS_CLUSTER_NODES', { REDIS_CLUSTER_NODES: 'r1' }],
    ['REDIS_SENTINELS', { REDIS_SENTINELS: 's1:99999', REDIS_SENTINEL_NAME: 'm' }],
    ['REDIS_SENTINEL_NAME', { REDIS_SENTINELS: 's1:26379' }],
    ['HOST', { HOST: 'bad host' }],
    ['TOLLGATE_EXPECTED_INSTANCES', { TOLLGATE_EXPECTED_INSTANCES: '0' }],
    ['TOLLGATE_AUTH_FAILURE_LIMIT', { TOLLGATE_AUTH_FAILURE_LIMIT: 'many' }],
    ['TOLLGATE_UPSTREAM_TIMEOUT_MS', { TOLLGATE_UPSTREAM_TIMEOUT_MS: '10' }],
    ['TOLLGATE_REDIS_PREFIX', { TOLLGATE_REDIS_PREFIX: 'has space' }],
  ] as [string, Record<string, string>][])('%s: %p', (variable, env) => {
    const { message } = configError(env);
    expect(new RegExp(`^${variable}[ :,]`).test(message)).toBe(true);
    expect(message.split('\n')).toHaveLength(1);
  });

  it('names the other variable when two Redis modes are set', () => {
    expect(
      configError({ REDIS_URL: 'redis://127.0.0.1:6379', REDIS_CLUSTER_NODES: 'r1:7000' }).message,
    ).toContain('REDIS_CLUSTER_NODES');
  });

  it('never puts the token secret into the message', () => {
    const short = 'short-but-secret-value';
    expect(configError({ TOLLGATE_TOKEN_SECRET: short }).message).not.toContain(short);
  });

  it('counts the secret in UTF-8 bytes, not characters', () => {
    expect(loadConfig({ TOLLGATE_TOKEN_SECRET: 'é'.repeat(16) }).tokenSecret).toBe('é'.repeat(16));
    expect(configError({ TOLLGATE_TOKEN_SECRET: `${'é'.repeat(15)}x` }).message).toMatch(
      /^TOLLGATE_TOKEN_SECRET /,
    );
  });
});

describe('loadConfig: the secret-scanning endpoint', () => {
  const database = { TOLLGATE_DATABASE_URL: 'postgres://127.0.0.1:5432/tollgate' };
  const withPath = { ...database, TOLLGATE_SECRET_SCANNING_PATH: '/leaks/github' };

  it('is off unless its path is set', () => {
    expect(loadConfig(database).secretScanning).toBeUndefined();
  });

  it("reads GitHub's public keys, revokes, and counts 120 reports a minute by default", () => {
    expect(loadConfig(withPath).secretScanning).toEqual({
      path: '/leaks/github',
      keysUrl: 'https://api.github.com/meta/public_keys/secret_scanning',
      keysFile: undefined,
      action: 'revoke',
      graceSeconds: 300,
      limit: 120,
    });
  });

  it('reads only a local keys document when it is given alone', () => {
    const config = loadConfig({
      ...withPath,
      TOLLGATE_SECRET_SCANNING_KEYS_FILE: '/etc/keys.json',
    });
    expect(config.secretScanning).toMatchObject({ keysUrl: undefined, keysFile: '/etc/keys.json' });
  });

  it.each([
    ['TOLLGATE_SECRET_SCANNING_PATH', { TOLLGATE_SECRET_SCANNING_PATH: '/leaks/github' }],
    [
      'TOLLGATE_SECRET_SCANNING_PATH',
      { TOLLGATE_KEYS_FILE: '/k.json', TOLLGATE_SECRET_SCANNING_PATH: '/leaks/github' },
    ],
    ['TOLLGATE_SECRET_SCANNING_PATH', { ...database, TOLLGATE_SECRET_SCANNING_PATH: 'leaks' }],
    ['TOLLGATE_SECRET_SCANNING_PATH', { ...database, TOLLGATE_SECRET_SCANNING_PATH: '/api/v1/x' }],
    ['TOLLGATE_SECRET_SCANNING_PATH', { ...database, TOLLGATE_SECRET_SCANNING_PATH: '/a/:id' }],
    ['TOLLGATE_SECRET_SCANNING_KEYS_URL', { ...database, TOLLGATE_SECRET_SCANNING_KEYS_URL: 'x' }],
    [
      'TOLLGATE_SECRET_SCANNING_KEYS_URL',
      { ...withPath, TOLLGATE_SECRET_SCANNING_KEYS_URL: 'http://keys.example.com/keys' },
    ],
    ['TOLLGATE_SECRET_SCANNING_ACTION', { ...withPath, TOLLGATE_SECRET_SCANNING_ACTION: 'delete' }],
    [
      'TOLLGATE_SECRET_SCANNING_GRACE_SECONDS',
      { ...withPath, TOLLGATE_SECRET_SCANNING_GRACE_SECONDS: '60' },
    ],
    [
      'TOLLGATE_SECRET_SCANNING_GRACE_SECONDS',
      {
        ...withPath,
        TOLLGATE_SECRET_SCANNING_ACTION: 'roll',
        TOLLGATE_SECRET_SCANNING_GRACE_SECONDS: '3601',
      },
    ],
    ['TOLLGATE_SECRET_SCANNING_LIMIT', { ...withPath, TOLLGATE_SECRET_SCANNING_LIMIT: '0' }],
  ] as [string, Record<string, string>][])('%s: %p', (variable, env) => {
    const { message } = configError(env);
    expect(message.startsWith(`${variable} `)).toBe(true);
  });

  it('takes http:// keys URLs on loopback only, and roll with a grace period', () => {
    const config = loadConfig({
      ...withPath,
      TOLLGATE_SECRET_SCANNING_KEYS_URL: 'http://127.0.0.1:9000/keys',
      TOLLGATE_SECRET_SCANNING_ACTION: 'roll',
      TOLLGATE_SECRET_SCANNING_GRACE_SECONDS: '60',
    });
    expect(config.secretScanning).toMatchObject({
      keysUrl: 'http://127.0.0.1:9000/keys',
      action: 'roll',
      graceSeconds: 60,
    });
  });
});

describe('loadConfig: tracing from the standard OTEL_* variables', () => {
  const ENDPOINT = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' };

  it('is off without an OTLP endpoint, and when the SDK or the exporter is turned off', () => {
    expect(loadConfig({}).tracing).toBeUndefined();
    expect(loadConfig({ OTEL_SERVICE_NAME: 'gateway' }).tracing).toBeUndefined();
    expect(loadConfig({ ...ENDPOINT, OTEL_SDK_DISABLED: 'true' }).tracing).toBeUndefined();
    expect(loadConfig({ ...ENDPOINT, OTEL_TRACES_EXPORTER: 'none' }).tracing).toBeUndefined();
  });

  it('is on with either endpoint, with the defaults of the specification, remote sampling not trusted', () => {
    const expected = {
      protocol: 'http/protobuf',
      sampler: 'parentbased_always_on',
      ratio: 1,
      trustRemoteSampling: false,
      probes: false,
      steps: false,
    };
    expect(loadConfig(ENDPOINT).tracing).toEqual(expected);
    expect(
      loadConfig({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://collector:4318/v1/traces' })
        .tracing,
    ).toEqual(expected);
  });

  it('reads the protocol, the sampler, its ratio, the trust of remote sampling, the tracing of probes and of steps', () => {
    expect(
      loadConfig({
        ...ENDPOINT,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.25',
        TOLLGATE_TRACE_TRUST_REMOTE_SAMPLING: 'true',
        TOLLGATE_TRACE_PROBES: 'true',
        TOLLGATE_TRACE_STEPS: 'true',
      }).tracing,
    ).toEqual({
      protocol: 'http/json',
      sampler: 'parentbased_traceidratio',
      ratio: 0.25,
      trustRemoteSampling: true,
      probes: true,
      steps: true,
    });
  });

  it.each([
    [{ TOLLGATE_TRACE_TRUST_REMOTE_SAMPLING: 'yes' }, 'TOLLGATE_TRACE_TRUST_REMOTE_SAMPLING'],
    [{ ...ENDPOINT, TOLLGATE_TRACE_PROBES: 'on' }, 'TOLLGATE_TRACE_PROBES'],
    [{ ...ENDPOINT, TOLLGATE_TRACE_STEPS: '1' }, 'TOLLGATE_TRACE_STEPS'],
    [{ ...ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, 'OTEL_EXPORTER_OTLP_PROTOCOL'],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }, 'OTEL_EXPORTER_OTLP_ENDPOINT'],
    [{ ...ENDPOINT, OTEL_TRACES_SAMPLER: 'jaeger_remote' }, 'OTEL_TRACES_SAMPLER'],
    [
      { ...ENDPOINT, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '1.5' },
      'OTEL_TRACES_SAMPLER_ARG',
    ],
    [{ ...ENDPOINT, OTEL_TRACES_EXPORTER: 'zipkin' }, 'OTEL_TRACES_EXPORTER'],
    [{ ...ENDPOINT, OTEL_SDK_DISABLED: '1' }, 'OTEL_SDK_DISABLED'],
  ] as [Record<string, string>, string][])('refuses %p, naming %s', (env, variable) => {
    expect(configError(env).message.startsWith(`${variable} `)).toBe(true);
  });
});

describe('loadConfig: idempotency keys', () => {
  /** The routes that take an Idempotency-Key, as the contract lists them (section 17). */
  const IDEMPOTENT_ROUTES = [
    '/api/v1/checkout/',
    '/api/v1/payouts/',
    '/api/v1/payouts/:id/approve/',
    '/api/v1/otp/confirm/',
    '/api/v1/chargebacks/',
  ];

  it('requires no key, keeps answers 24 hours and up to 64 KiB by default', () => {
    expect(loadConfig({}).idempotency).toEqual({
      required: [],
      ttlSeconds: 86_400,
      maxAnswerBytes: 65_536,
    });
  });

  it('requires a key on every route that takes one with "all"', () => {
    const { required } = loadConfig({ TOLLGATE_IDEMPOTENCY_REQUIRED: ' all ' }).idempotency;
    expect([...required].sort()).toEqual([...IDEMPOTENT_ROUTES].sort());
  });

  it.each([
    ['/api/v1/payouts/', ['/api/v1/payouts/']],
    ['/api/v1/payouts', ['/api/v1/payouts/']],
    [
      '/api/v1/payouts/:id/approve, /api/v1/chargebacks/',
      ['/api/v1/payouts/:id/approve/', '/api/v1/chargebacks/'],
    ],
    ['/api/v1/checkout,/api/v1/checkout/', ['/api/v1/checkout/']],
  ])('reads TOLLGATE_IDEMPOTENCY_REQUIRED=%p as %p', (value, expected) => {
    expect(loadConfig({ TOLLGATE_IDEMPOTENCY_REQUIRED: value }).idempotency.required).toEqual(
      expected,
    );
  });

  it.each([
    '/api/v1/wallets/',
    '/api/v1/payouts/,/api/v1/transactions/',
    '/api/v1/payout/',
    'payouts',
    '/api/v1/payouts/,,/api/v1/chargebacks/',
    'all,/api/v1/payouts/',
  ])('refuses TOLLGATE_IDEMPOTENCY_REQUIRED=%p, naming the variable', (value) => {
    const error = configError({ TOLLGATE_IDEMPOTENCY_REQUIRED: value });
    expect(error.message).toMatch(/^TOLLGATE_IDEMPOTENCY_REQUIRED /);
    expect(error.message).toContain('/api/v1/payouts/');
  });

  it.each([
    ['TOLLGATE_IDEMPOTENCY_TTL_SECONDS', '60', 'ttlSeconds', 60],
    ['TOLLGATE_IDEMPOTENCY_TTL_SECONDS', '604800', 'ttlSeconds', 604_800],
    ['TOLLGATE_IDEMPOTENCY_MAX_ANSWER_BYTES', '1024', 'maxAnswerBytes', 1024],
    ['TOLLGATE_IDEMPOTENCY_MAX_ANSWER_BYTES', '16777216', 'maxAnswerBytes', 16_777_216],
  ] as const)('reads %s=%s', (variable, value, field, expected) => {
    expect(loadConfig({ [variable]: value }).idempotency[field]).toBe(expected);
  });

  it.each([
    ['TOLLGATE_IDEMPOTENCY_TTL_SECONDS', '59'],
    ['TOLLGATE_IDEMPOTENCY_TTL_SECONDS', '604801'],
    ['TOLLGATE_IDEMPOTENCY_TTL_SECONDS', '1h'],
    ['TOLLGATE_IDEMPOTENCY_TTL_SECONDS', '-60'],
    ['TOLLGATE_IDEMPOTENCY_MAX_ANSWER_BYTES', '1023'],
    ['TOLLGATE_IDEMPOTENCY_MAX_ANSWER_BYTES', '16777217'],
    ['TOLLGATE_IDEMPOTENCY_MAX_ANSWER_BYTES', '64k'],
  ])('refuses %s=%s, naming the variable', (variable, value) => {
    const error = configError({ [variable]: value });
    expect(error.message).toMatch(new RegExp(`^${variable} `));
    expect(error.message).toContain(JSON.stringify(value));
  });
});
