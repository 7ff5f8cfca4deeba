import { readFileSync } from 'node:fs';
import path from 'node:path';
import { IDEMPOTENT_PATHS } from '../../gateway/routes';
import { IDEMPOTENCY_OUTCOMES } from '../../lib/internal';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';

/**
 * The Prometheus alert rules (deploy/prometheus/tollgate-alerts.yml) read the gateway's own
 * metrics: every series they select is one that `/metrics` serves, with the label values they
 * match, so a renamed metric or label cannot silence an alert. The alert table of
 * docs/operating.md names the same alerts with the same severity and `for`. What each rule
 * decides on given series is tested by promtool (`npm run rules:check`).
 */

const ROOT = path.join(__dirname, '../..');
const RULES = readFileSync(path.join(ROOT, 'deploy/prometheus/tollgate-alerts.yml'), 'utf8');
const RULE_TESTS = readFileSync(
  path.join(ROOT, 'deploy/prometheus/tollgate-alerts.test.yml'),
  'utf8',
);
const OPERATING = readFileSync(path.join(ROOT, 'docs/operating.md'), 'utf8');
const WALLETS = '/api/v1/wallets/';

interface Series {
  readonly name: string;
  readonly labels: ReadonlyMap<string, string>;
  readonly value: number;
}

/** `name{a="x",b="y"}` -> the label pairs (no quotes or commas inside values here). */
function labelPairs(braces: string): Map<string, string> {
  return new Map(
    [...braces.matchAll(/([a-zA-Z_]+)\s*=\s*"([^"]*)"/g)].map(
      (match) => [match[1] ?? '', match[2] ?? ''] as const,
    ),
  );
}

/** The samples of a `/metrics` text. */
function served(text: string): Series[] {
  return text
    .split('\n')
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$/.exec(line);
      if (match === null) throw new Error(`not a sample line: ${line}`);
      return {
        name: match[1] ?? '',
        labels: labelPairs(match[2] ?? ''),
        value: Number(match[3]),
      };
    });
}

/** Every selector of the rules' expressions: a metric name and its `label="value"` matchers. */
function selectors(): {
  readonly text: string;
  readonly name: string;
  matchers: Map<string, string>;
}[] {
  return [...RULES.matchAll(/\b((?:tollgate|nodejs|process)_[a-z0-9_]+)(\{[^}]*\})?/g)].map(
    (match) => ({
      text: match[0],
      name: match[1] ?? '',
      matchers: labelPairs(match[2] ?? ''),
    }),
  );
}

/** The labels Prometheus adds to every scraped series. */
const TARGET_LABELS = new Set(['job', 'instance']);

interface TestSeries {
  readonly text: string;
  readonly name: string;
  /** Its labels but the target's. */
  readonly labels: ReadonlyMap<string, string>;
  /** The first sample's value; `undefined` when the series is missing at first (`_`). */
  readonly first: number | undefined;
}

/** The input series of the promtool tests (deploy/prometheus/tollgate-alerts.test.yml). */
function testSeries(): TestSeries[] {
  return [
    ...RULE_TESTS.matchAll(
      /- series: '([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})'\n\s+values: '([^' ]+)/g,
    ),
  ].map((match) => {
    const labels = labelPairs(match[2] ?? '');
    for (const label of TARGET_LABELS) labels.delete(label);
    const first = /^[^+x]+/.exec(match[3] ?? '')?.[0] ?? '';
    return {
      text: `${match[1] ?? ''}${match[2] ?? ''}`,
      name: match[1] ?? '',
      labels,
      first: first.startsWith('_') ? undefined : Number(first),
    };
  });
}

function sameLabels(a: ReadonlyMap<string, string>, b: ReadonlyMap<string, string>): boolean {
  return a.size === b.size && [...a].every(([label, value]) => b.get(label) === value);
}

interface AlertSummary {
  readonly alert: string;
  readonly severity: string;
  readonly for: string;
}

/** Each rule's name, severity label and `for` (empty when it fires at once). */
function rulesAlerts(): AlertSummary[] {
  return RULES.split(/^ {6}- alert: /m)
    .slice(1)
    .map((rule) => ({
      alert: /^\S+/.exec(rule)?.[0] ?? '',
      severity: /^ {10}severity: (\S+)$/m.exec(rule)?.[1] ?? '',
      for: /^ {8}for: (\S+)$/m.exec(rule)?.[1] ?? '',
    }));
}

/** The rows of the alert table in docs/operating.md: alert, severity, for. */
function documentedAlerts(): AlertSummary[] {
  return [...OPERATING.matchAll(/^\| `(Tollgate\w+)` +\| (\w+) +\| (\w*) +\|/gm)].map((match) => ({
    alert: match[1] ?? '',
    severity: match[2] ?? '',
    for: match[3] ?? '',
  }));
}

/** The metric names each alert's expression reads, by alert. */
function metricsByAlert(): Map<string, Set<string>> {
  return new Map(
    RULES.split(/^ {6}- alert: /m)
      .slice(1)
      .map((rule) => {
        const expr = /^ {8}expr: ([\s\S]*?)^ {8}(?:for|labels):/m.exec(rule)?.[1] ?? '';
        const names = [...expr.matchAll(/\b((?:tollgate|nodejs|process)_[a-z0-9_]+)/g)].map(
          (match) => (match[1] ?? '').replace(/_(bucket|sum|count)$/, ''),
        );
        return [/^\S+/.exec(rule)?.[0] ?? '', new Set(names)] as const;
      }),
  );
}

interface RuleTestGroup {
  /** The metric names of the input series missing at first (`_`) and present later. */
  readonly appearing: Set<string>;
  /** The alerts some evaluation of the group expects to fire. */
  readonly firing: Set<string>;
}

/** The groups of the promtool tests, each with what appears mid-test and what fires. */
function ruleTestGroups(): RuleTestGroup[] {
  return RULE_TESTS.split(/^ {2}- interval: /m)
    .slice(1)
    .map((group) => {
      const appearing = new Set(
        [...group.matchAll(/- series: '([a-zA-Z_:][a-zA-Z0-9_:]*)[^']*'\n\s+values: '([^']+)'/g)]
          .filter((match) => (match[2] ?? '').startsWith('_') && /[0-9]/.test(match[2] ?? ''))
          .map((match) => (match[1] ?? '').replace(/_(bucket|sum|count)$/, '')),
      );
      const firing = new Set(
        [...group.matchAll(/alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels:/g)].map(
          (match) => match[1] ?? '',
        ),
      );
      return { appearing, firing };
    });
}

describe('the Prometheus alert rules', () => {
  let gateway: TestGateway;
  let series: Series[];
  /** The metric names `# TYPE` lines declare, with or without a sample yet. */
  let declared: Set<string>;
  /** What a gateway serves before its first request. */
  let fresh: Series[];

  beforeAll(async () => {
    gateway = await startTestGateway({ limits: { authFailures: 100_000 } });
    fresh = served(await gateway.app.metrics.text());
    const { admin } = gateway.fixtures.keys;
    // A refusal, and a secret key in a query string (refused too, and counted as leaked).
    const unknown = await gateway.send({ path: WALLETS, headers: bearer('sk_test_unknown') });
    expect(unknown.status).toBe(401);
    const leaked = await gateway.send({
      path: `${WALLETS}?api_key=${admin.secretKey}`,
      headers: bearer(admin.secretKey),
    });
    expect(leaked.status).toBe(400);
    const text = await gateway.app.metrics.text();
    series = served(text);
    declared = new Set(
      text
        .split('\n')
        .filter((line) => line.startsWith('# TYPE '))
        .map((line) => line.split(' ')[2] ?? ''),
    );
  });

  afterAll(async () => {
    await gateway.close();
  });

  it('select only metrics that /metrics serves, and series with the label values they match', () => {
    const found = selectors();
    expect(found.length).toBeGreaterThanOrEqual(10);
    // A counter with labels has no sample before its first event (a Redis command failure, an
    // upstream error): a selector without label matchers needs its metric declared.
    const unserved = found.filter(({ name, matchers }) =>
      matchers.size === 0
        ? !declared.has(name.replace(/_(bucket|sum|count)$/, ''))
        : !series.some(
            (sample) =>
              sample.name === name &&
              [...matchers].every(([label, value]) => sample.labels.get(label) === value),
          ),
    );
    expect(unserved.map(({ text }) => text)).toEqual([]);
  });

  it('see the first leaked key and the first failed reload: their counters are served from 0', () => {
    const value = (name: string, label: string, labelValue: string): number | undefined =>
      series.find((sample) => sample.name === name && sample.labels.get(label) === labelValue)
        ?.value;
    expect(value('tollgate_leaked_secret_keys_total', 'reason', 'sent_in_query_string')).toBe(1);
    expect(value('tollgate_leaked_secret_keys_total', 'reason', 'sent_from_browser')).toBe(0);
    expect(value('tollgate_leaked_secret_keys_total', 'reason', 'sent_as_publishable_key')).toBe(0);
    expect(value('tollgate_keys_reloads_total', 'outcome', 'failed')).toBe(0);
    // No key id, account or secret is a label of the leak counter.
    const leakLabels = series
      .filter((sample) => sample.name === 'tollgate_leaked_secret_keys_total')
      .flatMap((sample) => [...sample.labels.keys()]);
    expect(new Set(leakLabels)).toEqual(new Set(['reason']));
  });

  it('see the first keyed request refused 503 and the first answer not kept: served from 0', () => {
    const idempotency = series.filter((sample) => sample.name === 'tollgate_idempotency_total');
    // Every route that takes a key, by every outcome, at 0 before any keyed request.
    expect(idempotency).toHaveLength(IDEMPOTENT_PATHS.length * IDEMPOTENCY_OUTCOMES.length);
    for (const route of IDEMPOTENT_PATHS) {
      for (const outcome of ['unavailable', 'not_stored']) {
        const found = idempotency.find(
          (sample) =>
            sample.labels.get('route') === route && sample.labels.get('outcome') === outcome,
        );
        expect(found?.value).toBe(0);
      }
    }
    // Labels from closed sets only: no account, key id or Idempotency-Key.
    const labels = new Set(idempotency.flatMap((sample) => [...sample.labels.keys()]));
    expect(labels).toEqual(new Set(['route', 'outcome']));
  });

  it('are tested by promtool on series shaped as /metrics serves them', () => {
    const inputs = testSeries();
    expect(inputs.length).toBeGreaterThanOrEqual(40);
    const labelNames = (name: string): Set<string> =>
      new Set(
        series
          .filter((sample) => sample.name === name)
          .flatMap((sample) => [...sample.labels.keys()]),
      );
    const misshapen = inputs.filter((input) => {
      // A gateway's own metric: declared, and with the label names its samples carry.
      if (input.name.startsWith('tollgate_')) {
        if (!declared.has(input.name.replace(/_(bucket|sum|count)$/, ''))) return true;
        const names = labelNames(input.name);
        const given = [...input.labels.keys()];
        if (names.size > 0 && (names.size !== given.length || !given.every((n) => names.has(n)))) {
          return true;
        }
      }
      // A series there from the first sample at 0 is one a gateway serves before any event: a
      // counter that is not pre-created only appears with its first event, above 0.
      if (input.first === 0) {
        return !fresh.some(
          (sample) => sample.name === input.name && sameLabels(sample.labels, input.labels),
        );
      }
      return false;
    });
    expect(misshapen.map(({ text }) => text)).toEqual([]);
  });

  it('fire, each, in a promtool case where a series it reads first appears mid-test', () => {
    const groups = ruleTestGroups();
    const silent = [...metricsByAlert()]
      .filter(
        ([alert, metrics]) =>
          !groups.some(
            (group) =>
              group.firing.has(alert) && [...group.appearing].some((name) => metrics.has(name)),
          ),
      )
      .map(([alert]) => alert);
    expect(silent).toEqual([]);
  });

  it('are the alerts of the table in docs/operating.md, with the same severity and for', () => {
    const rules = rulesAlerts();
    expect(rules.length).toBe(13);
    expect(documentedAlerts()).toEqual(rules);
  });
});
