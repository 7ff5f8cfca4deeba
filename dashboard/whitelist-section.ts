import type { ListedAccountAnswer } from '../gateway/admin/answers';
import type { ApiError } from './api';
import { h, uid } from './dom';
import type { Ui } from './ui';

/**
 * An account's IP whitelist: what it is, and with the database key store an editor with one field
 * per entry. Entries are checked by the server's own parser only: the entry it names is marked
 * invalid with the message beside it, and nothing is saved while one is wrong.
 */
export function whitelistSection(ui: Ui, account: ListedAccountAnswer): HTMLElement {
  const list = account.ip_whitelist;
  const summary =
    list === null
      ? h('p', {}, 'Not restricted: secret-key requests are accepted from any address.')
      : h('p', {}, `Secret-key requests only from: ${list.join(', ') || 'nowhere (empty list)'}.`);
  if (!ui.writable) return h('section', {}, h('h3', {}, 'IP whitelist'), summary);

  const entries = h('ol', { class: 'entries' });
  const formError = h('p', { class: 'field-error', id: uid('error') });
  for (const entry of list ?? []) entries.append(entryItem(entries, entry));
  const add = h('button', { type: 'button' }, 'Add entry');
  add.addEventListener('click', () => {
    const item = entryItem(entries, '');
    entries.append(item);
    item.querySelector('input')?.focus();
  });
  const save = h('button', { type: 'submit' }, 'Save whitelist');
  const lift = h('button', { type: 'button' }, 'Lift restriction');
  const form = h(
    'form',
    { class: 'whitelist', novalidate: true },
    entries,
    h('div', { class: 'buttons' }, add, save, list !== null && lift),
    formError,
  );
  const inputs = (): HTMLInputElement[] => [...entries.querySelectorAll('input')];
  const besideOf = (input: HTMLInputElement): HTMLElement | null =>
    document.getElementById(input.getAttribute('aria-describedby') ?? '');
  const clearErrors = (): void => {
    for (const input of inputs()) {
      input.removeAttribute('aria-invalid');
      const beside = besideOf(input);
      if (beside !== null) beside.textContent = '';
    }
  };
  /** The server names the entry at fault (`entries[2]: …`): its message goes beside it. */
  const besideEntry = (error: ApiError): boolean => {
    const match = /^entries\[(\d+)\]: (.*)$/.exec(error.message);
    const input = match === null ? undefined : inputs()[Number(match[1])];
    if (match === null || input === undefined) return false;
    input.setAttribute('aria-invalid', 'true');
    const beside = besideOf(input);
    if (beside !== null) beside.textContent = match[2] ?? error.message;
    input.focus();
    ui.announce(`Not saved: entry ${Number(match[1]) + 1}: ${match[2] ?? ''}`);
    return true;
  };
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    clearErrors();
    const values = inputs().map((input) => input.value.trim());
    ui.change({
      control: save,
      errorBox: formError,
      onError: besideEntry,
      run: async () => {
        await ui.api.setWhitelist(account.id, values);
        return { message: `Whitelist of ${account.id} saved.` };
      },
    });
  });
  lift.addEventListener('click', () => {
    clearErrors();
    ui.change({
      control: lift,
      errorBox: formError,
      run: async () => {
        await ui.api.setWhitelist(account.id, null);
        return { message: `Whitelist of ${account.id} lifted.` };
      },
    });
  });
  return h('section', {}, h('h3', {}, 'IP whitelist'), summary, form);
}

/** One entry's field, its Remove button (named after what the field holds) and its error line. */
function entryItem(entries: HTMLElement, value: string): HTMLElement {
  const id = uid('entry');
  const errorId = uid('error');
  const input = h('input', {
    id,
    value,
    class: 'entry',
    autocomplete: 'off',
    spellcheck: 'false',
    'aria-describedby': errorId,
    placeholder: '203.0.113.0/24',
  });
  const remove = h('button', { type: 'button' }, 'Remove');
  const name = (): void => {
    remove.setAttribute('aria-label', `Remove entry ${input.value.trim() || '(empty)'}`);
  };
  name();
  input.addEventListener('input', name);
  const item = h(
    'li',
    {},
    h('label', { for: id }, 'Address or CIDR range'),
    input,
    remove,
    h('p', { id: errorId, class: 'field-error' }),
  );
  remove.addEventListener('click', () => {
    item.remove();
    entries.querySelector('input')?.focus();
  });
  return item;
}
