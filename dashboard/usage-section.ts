import type { ListedAccountAnswer, ScopeUsageAnswer } from '../gateway/admin/answers';
import { fill, h, uid } from './dom';
import { errorText, type Ui } from './ui';

/**
 * An account's per-account limit scopes, read from the counters that decide: what is left in the
 * last window (it rolls) and when its oldest admission leaves it; with the database key store, the account's own limit per
 * scope (empty: the default) and Save limits.
 */
export function usageSection(ui: Ui, account: ListedAccountAnswer): HTMLElement {
  const box = h('div', { class: 'usage', 'aria-busy': 'true' }, 'Loading limits…');
  ui.api.usage(account.id).then(
    ({ scopes }) => {
      box.removeAttribute('aria-busy');
      if (scopes.length === 0) {
        fill(box, h('p', { class: 'empty' }, 'No per-account limit applies to this account.'));
        return;
      }
      fill(box, ui.writable ? limitsForm(ui, account, scopes) : usageTable(account, scopes));
    },
    (error: unknown) => {
      box.removeAttribute('aria-busy');
      fill(box, h('p', { class: 'field-error' }, errorText(error)));
    },
  );
  return h('section', {}, h('h3', {}, 'Limits in the current window'), box);
}

function limitsForm(
  ui: Ui,
  account: ListedAccountAnswer,
  scopes: readonly ScopeUsageAnswer[],
): HTMLElement {
  const inputs = new Map<string, HTMLInputElement>();
  const error = h('p', { class: 'field-error', id: uid('error') });
  const submit = h('button', { type: 'submit' }, 'Save limits');
  const form = h(
    'form',
    { class: 'limits' },
    usageTable(account, scopes, inputs, error.id),
    submit,
    error,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const limits: Record<string, number> = {};
    for (const [scope, input] of inputs) {
      if (input.value.trim() !== '') limits[scope] = Number(input.value);
    }
    ui.change({
      control: submit,
      errorBox: error,
      run: async () => {
        await ui.api.setLimits(account.id, Object.keys(limits).length === 0 ? null : limits);
        return { message: `Limits of ${account.id} saved.` };
      },
    });
  });
  return form;
}

/** The scopes' table; with `inputs`, a field per scope for the account's own limit. */
function usageTable(
  account: ListedAccountAnswer,
  scopes: readonly ScopeUsageAnswer[],
  inputs?: Map<string, HTMLInputElement>,
  errorId?: string,
): HTMLElement {
  const rows = scopes.map((scope) => {
    const used =
      scope.limit === 0 ? 0 : Math.round((100 * (scope.limit - scope.remaining)) / scope.limit);
    let own: HTMLElement | null = null;
    if (inputs !== undefined) {
      const id = uid('limit');
      const value = account.limits?.[scope.scope];
      const input = h('input', {
        id,
        type: 'number',
        min: '1',
        max: '1000000',
        step: '1',
        inputmode: 'numeric',
        value: value === undefined ? '' : String(value),
        placeholder: 'default',
        'aria-describedby': errorId,
      });
      inputs.set(scope.scope, input);
      own = h(
        'td',
        {},
        h(
          'label',
          { for: id, class: 'visually-hidden' },
          `Own limit per minute for ${scope.scope}`,
        ),
        input,
      );
    }
    return h(
      'tr',
      {},
      h('th', { scope: 'row' }, scope.scope),
      h(
        'td',
        {},
        h('meter', {
          min: '0',
          max: String(scope.limit),
          value: String(scope.limit - scope.remaining),
          'aria-label': `${scope.scope}: ${used}% used`,
        }),
        ` ${scope.remaining} of ${scope.limit} left`,
      ),
      h('td', {}, `${scope.reset_seconds} s`),
      own,
    );
  });
  return h(
    'div',
    { class: 'table-scroll' },
    h(
      'table',
      { class: 'usage-table' },
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          h('th', { scope: 'col' }, 'Scope'),
          h('th', { scope: 'col' }, 'Left'),
          h('th', { scope: 'col' }, 'Oldest leaves in'),
          inputs !== undefined && h('th', { scope: 'col' }, 'Own limit per minute'),
        ),
      ),
      h('tbody', {}, ...rows),
    ),
  );
}
