import { readFileSync } from 'node:fs';
import path from 'node:path';
import { bearer, startTestGateway, type TestGateway } from '../helpers/gateway';

/**
 * The Grafana dashboard (deploy/grafana) against a real scrape: it shows every metric an alert
 * rule reads, and each panel's query groups and matches by labels that the metric's series
 * really carry, so that no panel stays empty or merges what it means to tell apart.
 */

const ROOT = path.join(__dirname, '../..');
const RULES = readFileSync(path.join(ROOT, 'deploy/prometheus/tollgate-alerts.yml'), 'utf8');
const WALLETS = '/api/v1/wallets/';

interface Panel {
  readonly type: string;
  readonly title: string;
  readonly targets?: readonly { readonly expr: string; readonly legendFormat?: string }[];
}

const dashboard = JSON.parse(
  readFileSync(path.join(ROOT, 'deploy/grafana/tollgate-dashboard.json'), 'utf8'),
) as { panels: Panel[] };

/** Labels every scraped series has, or a histogram's buckets. */
const GENERAL_LABELS = new Set(['instance', 'job', 'le']);

function metricNames(query: string): string[] {
  return [...query.matchAll(/\b((?:tollgate|process|nodejs)_[a-z0-9_]+)/g)].map(
    (match) => match[1] ?? '',
  );
}

/** The labels a query groups by (`by (a, b)`), matches (`a="x"`) or shows (`{{a}}`). */
function labelsUsed(query: string, legend: string): string[] {
  return [
    ...[...query.matchAll(/\bby \(([^)]*)\)/g)].flatMap((match) =>
      (match[1] ?? '').split(',').map((label) => label.trim()),
    ),
    ...[...query.matchAll(/([a-z_]+)\s*(?:=~|!=|=)\s*"/g)].map((match) => match[1] ?? ''),
    ...[...legend.matchAll(/\{\{\s*([a-z_]+)\s*\}\}/g)].map((match) => match[1] ?? ''),
  ].filter((label) => label !== '' && !GENERAL_LABELS.has(label));
}

describe('the Grafana dashboard against a scrape', () => {
  let gateway: TestGateway;
  /** Metric name to the label names its samples carry. */
  const labelsOf = new Map<string, Set<string>>();
  const declared = new Set<string>();

  beforeAll(async () => {
    gateway = await startTestGateway({ limits: { authFailures: 100_000 } });
    const { admin } = gateway.fixtures.keys;
    // An allowed request, a refusal and a secret key sent in a query string.
    expect((await gateway.send({ path: WALLETS, headers: bearer(admin.secretKey) })).status).toBe(
      200,
    );
    expect((await gateway.send({ path: WALLETS, headers: bearer('sk_test_unknown') })).status).toBe(
      401,
    );
    const leaked = await gateway.send({
      path: `${WALLETS}?api_key=${admin.secretKey}`,
      headers: bearer(admin.secretKey),
    });
    expect(leaked.status).toBe(400);
    for (const line of (await gateway.app.metrics.text()).split('\n')) {
      if (line.startsWith('# TYPE ')) declared.add(line.split(' ')[2] ?? '');
      const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}/.exec(line);
      if (sample === null) continue;
      const names = labelsOf.get(sample[1] ?? '') ?? new Set<string>();
      for (const pair of (sample[2] ?? '').matchAll(/([a-zA-Z_]+)="/g)) names.add(pair[1] ?? '');
      labelsOf.set(sample[1] ?? '', names);
    }
  });

  afterAll(async () => {
    await gateway.close();
  });

  const targets = dashboard.panels.flatMap((panel) =>
    (panel.targets ?? []).map((target) => ({ panel: panel.title, ...target })),
  );

  it('shows every metric an alert rule reads', () => {
    // A histogram's series (`_bucket`, `_count`, `_sum`) are one metric.
    const family = (name: string): string => name.replace(/_(bucket|sum|count)$/, '');
    const shown = new Set(targets.flatMap((target) => metricNames(target.expr).map(family)));
    const alerted = new Set(metricNames(RULES).map(family));
    expect(alerted.size).toBeGreaterThanOrEqual(10);
    expect([...alerted].filter((name) => !shown.has(name))).toEqual([]);
  });

  it('groups, matches and shows only labels the series of its metrics carry', () => {
    expect(targets.length).toBeGreaterThan(25);
    const wrong = targets.flatMap(({ panel, expr, legendFormat }) => {
      const metrics = metricNames(expr);
      const undeclared = metrics.filter(
        (name) => !declared.has(name.replace(/_(bucket|sum|count)$/, '')),
      );
      if (undeclared.length > 0) return [`${panel}: ${undeclared.join(', ')} not served`];
      // A metric without a sample yet (no Redis command failed here) is checked by name only.
      const carried = metrics.flatMap((name) => [...(labelsOf.get(name) ?? [])]);
      if (metrics.every((name) => !labelsOf.has(name))) return [];
      return labelsUsed(expr, legendFormat ?? '')
        .filter((label) => !carried.includes(label))
        .map((label) => `${panel}: no series of ${metrics.join(', ')} has label ${label}`);
    });
    expect(wrong).toEqual([]);
  });
});
