import type { KeyAnswer, ListedAccountAnswer } from '../gateway/admin/answers';
import { h, uid, when } from './dom';
import { ROLES, type ShownSecret, type Ui } from './ui';

/**
 * An account's keys: a table (a card per key under 48rem), and with the database key store the
 * changes: role, roll with a grace period, revoke after a confirmation naming the key, and a new
 * key, whose secret is shown once above the table.
 */

/** The admin API's upper bound for a roll's grace period, in seconds (7 days). */
const MAX_GRACE_SECONDS = 604_800;

export function keysSection(ui: Ui, account: ListedAccountAnswer): HTMLElement {
  const shown = ui.secretFor(account);
  const table =
    account.keys.length === 0
      ? h('p', { class: 'empty' }, 'This account has no keys.')
      : h(
          'div',
          { class: 'table-scroll' },
          h(
            'table',
            { class: 'keys' },
            h('caption', { class: 'visually-hidden' }, `Keys of ${account.id}`),
            h(
              'thead',
              {},
              h(
                'tr',
                {},
                ...[
                  'Key',
                  'Role',
                  'Permissions',
                  'Created',
                  'Expires',
                  'Revoked',
                  'Last used',
                  ui.writable ? 'Actions' : '',
                ].map((name) => (name === '' ? null : h('th', { scope: 'col' }, name))),
              ),
            ),
            h('tbody', {}, ...account.keys.map((key) => keyRow(ui, key))),
          ),
        );
  return h(
    'section',
    {},
    h('h3', {}, 'Keys'),
    shown && secretPanel(shown),
    table,
    ui.writable && createKeyForm(ui, account),
  );
}

function keyRow(ui: Ui, key: KeyAnswer): HTMLElement {
  const state = key.revoked
    ? 'revoked'
    : key.expires_at !== null && Date.parse(key.expires_at) <= Date.now()
      ? 'expired'
      : 'active';
  return h(
    'tr',
    { class: state },
    h('th', { scope: 'row' }, h('code', {}, key.id), h('span', { class: `badge ${state}` }, state)),
    // Each cell names its column too: under 48rem the rows are cards and the header is hidden.
    h('td', { 'data-label': 'Role' }, key.role),
    h(
      'td',
      { 'data-label': 'Permissions' },
      key.permissions === null ? 'all of its role' : key.permissions.join(', ') || 'none',
    ),
    h('td', { 'data-label': 'Created' }, when(key.created_at)),
    h('td', { 'data-label': 'Expires' }, when(key.expires_at)),
    h(
      'td',
      { 'data-label': 'Revoked' },
      key.revoked_at === null && key.revoked ? 'yes' : when(key.revoked_at),
    ),
    h('td', { 'data-label': 'Last used' }, when(key.last_used_at)),
    ui.writable && h('td', { class: 'actions' }, ...(key.revoked ? [] : keyActions(ui, key))),
  );
}

function keyActions(ui: Ui, key: KeyAnswer): HTMLElement[] {
  const roleId = uid('role');
  const error = h('p', { class: 'field-error', id: uid('error') });
  const role = h(
    'select',
    { id: roleId, 'aria-describedby': error.id },
    ...ROLES.map((name) => h('option', { value: name, selected: name === key.role }, name)),
  );
  const saveRole = h('button', { type: 'button' }, 'Change role');
  saveRole.addEventListener('click', () => {
    ui.change({
      control: saveRole,
      errorBox: error,
      run: async () => {
        await ui.api.setRole(key.id, role.value);
        return { message: `Key ${key.id} is now ${role.value}.` };
      },
    });
  });
  const graceId = uid('grace');
  const grace = h('input', {
    id: graceId,
    type: 'number',
    min: '0',
    max: String(MAX_GRACE_SECONDS),
    step: '1',
    value: '86400',
    inputmode: 'numeric',
    'aria-describedby': error.id,
  });
  const roll = h('button', { type: 'button' }, 'Roll');
  roll.addEventListener('click', () => {
    const seconds = graceSeconds(grace.value);
    grace.removeAttribute('aria-invalid');
    if (seconds === undefined) {
      error.textContent = `Grace: a whole number of seconds from 0 to ${MAX_GRACE_SECONDS}.`;
      grace.setAttribute('aria-invalid', 'true');
      grace.focus();
      ui.announce(`Not rolled: ${error.textContent}`);
      return;
    }
    ui.change({
      control: roll,
      errorBox: error,
      run: async () => {
        const rolled = await ui.api.roll(key.id, seconds);
        return {
          message: `Key ${key.id} rolled: the new key is ${rolled.id}.`,
          secret: {
            accountId: rolled.account_id,
            key: rolled,
            title: `Rolled ${key.id} into ${rolled.id}; the old key stops after ${seconds} s.`,
          },
        };
      },
    });
  });
  const revoke = h('button', { type: 'button', class: 'danger' }, 'Revoke…');
  revoke.addEventListener('click', () => {
    confirmRevoke(ui, key, revoke, error);
  });
  return [
    h('div', { class: 'action' }, h('label', { for: roleId }, `Role of ${key.id}`), role, saveRole),
    h(
      'div',
      { class: 'action' },
      h('label', { for: graceId }, `Grace seconds for ${key.id}`),
      grace,
      roll,
    ),
    h('div', { class: 'action' }, revoke),
    error,
  ];
}

/** The field's whole seconds from 0 to the API's maximum, or `undefined`. */
function graceSeconds(value: string): number | undefined {
  if (!/^\d{1,7}$/.test(value.trim())) return undefined;
  const seconds = Number(value);
  return seconds <= MAX_GRACE_SECONDS ? seconds : undefined;
}

/** A modal that names the key; Cancel has the focus first, so Enter alone revokes nothing. */
function confirmRevoke(
  ui: Ui,
  key: KeyAnswer,
  opener: HTMLButtonElement,
  error: HTMLElement,
): void {
  const titleId = uid('confirm');
  const cancel = h('button', { type: 'button' }, 'Cancel');
  const confirm = h('button', { type: 'button', class: 'danger' }, `Revoke ${key.id}`);
  const dialog = h(
    'dialog',
    { 'aria-labelledby': titleId },
    h('h2', { id: titleId }, `Revoke key ${key.id}?`),
    h(
      'p',
      {},
      'Requests with this key, and tokens issued from it, are refused on every instance within a second. This cannot be undone.',
    ),
    h('div', { class: 'buttons' }, cancel, confirm),
  );
  const close = (): void => {
    dialog.close();
    dialog.remove();
  };
  cancel.addEventListener('click', () => {
    close();
    opener.focus();
  });
  dialog.addEventListener('cancel', (event) => {
    event.preventDefault();
    close();
    opener.focus();
  });
  confirm.addEventListener('click', () => {
    close();
    ui.change({
      control: opener,
      errorBox: error,
      run: async () => {
        await ui.api.revoke(key.id);
        return { message: `Key ${key.id} revoked.` };
      },
    });
  });
  document.body.append(dialog);
  dialog.showModal();
  cancel.focus();
}

function createKeyForm(ui: Ui, account: ListedAccountAnswer): HTMLElement {
  const roleId = uid('new-role');
  const error = h('p', { class: 'field-error', id: uid('error') });
  const role = h(
    'select',
    { id: roleId, 'aria-describedby': error.id },
    ...ROLES.map((name) => h('option', { value: name, selected: name === 'level-1' }, name)),
  );
  const submit = h('button', { type: 'submit' }, 'Create key');
  const form = h(
    'form',
    { class: 'create-key' },
    h('label', { for: roleId }, 'Role of the new key'),
    role,
    submit,
    error,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    ui.change({
      control: submit,
      errorBox: error,
      run: async () => {
        const created = await ui.api.createKey(account.id, role.value);
        return {
          message: `Key ${created.id} created.`,
          secret: { accountId: account.id, key: created, title: `Key ${created.id} created.` },
        };
      },
    });
  });
  return form;
}

/** The one time a secret is shown: the page holds it until it is reloaded or left. */
function secretPanel(shown: ShownSecret): HTMLElement {
  const id = uid('secret');
  const input = h('input', {
    id,
    readonly: true,
    value: shown.key.secret_key,
    class: 'secret',
    spellcheck: 'false',
    autocomplete: 'off',
  });
  const copy = h('button', { type: 'button', class: 'copy-secret' }, 'Copy secret');
  const copied = h('span', { class: 'copied', role: 'status' });
  copy.addEventListener('click', () => {
    input.select();
    navigator.clipboard.writeText(shown.key.secret_key).then(
      () => {
        copied.textContent = 'Copied.';
      },
      () => {
        copied.textContent = 'Selected: press Ctrl+C to copy.';
      },
    );
  });
  return h(
    'div',
    { class: 'panel secret-shown', role: 'region', 'aria-label': 'New secret key' },
    h('p', {}, h('strong', {}, shown.title), ' Its secret is shown this once: store it now.'),
    h('p', {}, 'Publishable key: ', h('code', {}, shown.key.publishable_key)),
    h('label', { for: id }, 'Secret key'),
    input,
    copy,
    copied,
  );
}
