import { readFileSync } from 'node:fs';
import path from 'node:path';
import { GatewayMetrics } from '../../../gateway/metrics';

/**
 * The Grafana dashboard (deploy/grafana) is built from the gateway's own metrics: every metric its
 * queries name is one that `/metrics` serves, so a renamed metric cannot leave a panel empty.
 */

interface Panel {
  readonly type: string;
  readonly title: string;
  readonly targets?: readonly { readonly expr: string }[];
}

const dashboard = JSON.parse(
  readFileSync(path.join(__dirname, '../../../deploy/grafana/tollgate-dashboard.json'), 'utf8'),
) as { panels: Panel[]; templating: { list: { query: unknown }[] } };

describe('the Grafana dashboard', () => {
  it('queries only metrics that /metrics serves', async () => {
    const metrics = new GatewayMetrics({
      scopes: ['payments'],
      rateLimitState: () => 'shared',
      degradedSince: () => undefined,
      keys: () => ({ status: 'ready', count: 1 }),
      upstream: () => ({ up: true, reason: undefined, checkedAt: 1, latencySeconds: 0.001 }),
      ready: () => true,
    });
    const served = new Set(
      (await metrics.text())
        .split('\n')
        .filter((line) => line.startsWith('# TYPE '))
        .map((line) => line.split(' ')[2]),
    );
    const queries = dashboard.panels.flatMap((panel) =>
      (panel.targets ?? []).map((target) => target.expr),
    );
    expect(queries.length).toBeGreaterThan(20);
    const named = new Set(
      [...queries, JSON.stringify(dashboard.templating)].flatMap((query) =>
        [...query.matchAll(/\b((?:tollgate|process|nodejs)_[a-z0-9_]+)/g)].map((match) =>
          (match[1] ?? '').replace(/_(bucket|sum|count)$/, ''),
        ),
      ),
    );
    expect([...named].filter((name) => !served.has(name))).toEqual([]);
    // Every panel that shows data has a query.
    for (const panel of dashboard.panels) {
      if (panel.type !== 'row') expect(panel.targets?.length ?? 0).toBeGreaterThan(0);
    }
  });
});
