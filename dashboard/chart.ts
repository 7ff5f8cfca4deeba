import type { MinuteAnswer } from '../gateway/admin/answers';
import { h, svg } from './dom';

/**
 * The last 15 minutes of an account's decisions as stacked bars, one a minute: allowed, limited,
 * refused. Drawn as SVG with classes for the colours (no inline style: the CSP), and given as a
 * table too, which screen readers read instead of the picture.
 */

const WIDTH = 600;
const HEIGHT = 160;
const AXIS = 28;

const SERIES = [
  { key: 'allowed', label: 'Allowed' },
  { key: 'limited', label: 'Limited' },
  { key: 'refused', label: 'Refused' },
] as const;

type Series = (typeof SERIES)[number]['key'];

function counts(minute: MinuteAnswer): Record<Series, number> {
  const refused = Object.values(minute.refused).reduce((sum, n) => sum + n, 0);
  return { allowed: minute.allowed, limited: minute.limited, refused };
}

/** `code n, code n` in the order the server gave them; empty when nothing was refused. */
function refusedCodes(refused: Readonly<Record<string, number>>): string {
  return Object.entries(refused)
    .map(([code, n]) => `${code} ${n}`)
    .join(', ');
}

function minuteSummary(minute: MinuteAnswer, total: Record<Series, number>): string {
  const codes = refusedCodes(minute.refused);
  return (
    `${clock(minute.start)}: ${total.allowed} allowed, ${total.limited} limited, ` +
    `${total.refused} refused${codes === '' ? '' : ` (${codes})`}`
  );
}

/** The refusals of the 15 minutes by code, in words under the chart; none: nothing. */
function refusedSummary(minutes: readonly MinuteAnswer[]): HTMLElement | null {
  const byCode: Record<string, number> = {};
  for (const minute of minutes) {
    for (const [code, n] of Object.entries(minute.refused)) byCode[code] = (byCode[code] ?? 0) + n;
  }
  const codes = refusedCodes(byCode);
  return codes === '' ? null : h('p', { class: 'refused-codes' }, `Refused, by code: ${codes}.`);
}

function clock(iso: string): string {
  return new Date(iso).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
}

export function decisionChart(minutes: readonly MinuteAnswer[]): HTMLElement {
  const totals = minutes.map(counts);
  const top = Math.max(1, ...totals.map((t) => t.allowed + t.limited + t.refused));
  const any = totals.some((t) => t.allowed + t.limited + t.refused > 0);
  const slot = (WIDTH - AXIS) / Math.max(1, minutes.length);
  const bars: SVGElement[] = [];
  totals.forEach((total, index) => {
    const minute = minutes[index];
    if (minute === undefined || total.allowed + total.limited + total.refused === 0) return;
    // One group a minute, titled with its counts: a pointer over a bar shows them.
    const group = svg('g', {}, svg('title', {}, minuteSummary(minute, total)));
    let y = HEIGHT - 16;
    for (const { key } of SERIES) {
      const height = ((HEIGHT - 24) * total[key]) / top;
      if (height <= 0) continue;
      y -= height;
      group.append(
        svg('rect', {
          class: `bar bar-${key}`,
          x: String(AXIS + index * slot + 2),
          y: String(y),
          width: String(Math.max(1, slot - 4)),
          height: String(height),
        }),
      );
    }
    bars.push(group);
  });
  const first = minutes[0];
  const last = minutes[minutes.length - 1];
  const picture = svg(
    'svg',
    {
      class: 'chart',
      viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
      role: 'img',
      'aria-label': 'Decisions per minute, last 15 minutes',
      preserveAspectRatio: 'none',
    },
    svg('line', {
      class: 'axis',
      x1: String(AXIS),
      y1: '8',
      x2: String(AXIS),
      y2: String(HEIGHT - 16),
    }),
    svg('text', { class: 'tick', x: '0', y: '16' }, String(top)),
    svg('text', { class: 'tick', x: '0', y: String(HEIGHT - 16) }, '0'),
    first &&
      svg('text', { class: 'tick', x: String(AXIS), y: String(HEIGHT - 2) }, clock(first.start)),
    last &&
      svg(
        'text',
        { class: 'tick end', x: String(WIDTH), y: String(HEIGHT - 2) },
        clock(last.start),
      ),
    ...bars,
  );
  const legend = h(
    'ul',
    { class: 'legend' },
    ...SERIES.map(({ key, label }) =>
      h('li', {}, h('span', { class: `swatch bar-${key}`, 'aria-hidden': 'true' }), label),
    ),
  );
  // Hidden in a box of its own: a table is never narrower than its content, a 1 px box is.
  const table = h(
    'table',
    {},
    h('caption', {}, 'Decisions per minute'),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        h('th', { scope: 'col' }, 'Minute'),
        h('th', { scope: 'col' }, 'Allowed'),
        h('th', { scope: 'col' }, 'Limited'),
        h('th', { scope: 'col' }, 'Refused'),
      ),
    ),
    h(
      'tbody',
      {},
      ...minutes.map((minute, index) =>
        h(
          'tr',
          {},
          h('th', { scope: 'row' }, clock(minute.start)),
          h('td', {}, String(totals[index]?.allowed ?? 0)),
          h('td', {}, String(totals[index]?.limited ?? 0)),
          h('td', {}, refusedCodes(minute.refused) || '0'),
        ),
      ),
    ),
  );
  return h(
    'figure',
    { class: 'decisions' },
    any
      ? picture
      : h('p', { class: 'empty' }, 'No requests from this account in the last 15 minutes.'),
    any && legend,
    any && refusedSummary(minutes),
    any && h('div', { class: 'visually-hidden' }, table),
  );
}
