import { type AccountView, Api, ApiError, type KeyView, type NewKey, type Session } from './api';
import { decisionChart } from './chart';
import { byId, fill, h, uid, when } from './dom';

/**
 * The operators' dashboard (contract 15): sign-in, accounts and their keys, and with the database
 * key store the changes: create, roll, revoke, role, IP whitelist, limits. Every change is a call
 * of the admin API (api.ts); the page keeps nothing but what it shows, and a new secret only
 * until the next reload.
 */

/** The seed's roles, lowest first (lib/core/roles.ts). */
const ROLES = ['level-1', 'level-2', 'level-3', 'administrator'] as const;

const api = new Api();
const root = byId('app');
const live = byId('live');
const signOut = byId('sign-out');

let session: Session | undefined;
let accounts: AccountView[] = [];
let selected: string | undefined;
let filter = '';

/** Says `message` to screen readers and shows it in the status line. */
function announce(message: string): void {
  live.textContent = message;
}

function errorText(error: unknown): string {
  if (error instanceof ApiError) return `${error.message} (${error.code})`;
  return error instanceof Error ? error.message : String(error);
}

/**
 * Whether this browser signed in and has not signed out: a flag, never a secret (the session is
 * the `HttpOnly` cookie). Without it the page shows the sign-in form at once, without asking the
 * server for a session it does not have.
 */
const SIGNED_IN = 'tollgate-dashboard:signed-in';

function rememberSignedIn(yes: boolean): void {
  try {
    if (yes) localStorage.setItem(SIGNED_IN, '1');
    else localStorage.removeItem(SIGNED_IN);
  } catch {
    // storage disabled: the page asks the server each time
  }
}

function maybeSignedIn(): boolean {
  try {
    return localStorage.getItem(SIGNED_IN) === '1';
  } catch {
    return true;
  }
}

async function start(): Promise<void> {
  if (!maybeSignedIn()) {
    showSignIn();
    return;
  }
  fill(root, h('p', { class: 'loading', 'aria-busy': 'true' }, 'Loading…'));
  try {
    session = await api.session();
  } catch (error) {
    showFatal(error, start);
    return;
  }
  if (session === undefined) {
    rememberSignedIn(false);
    showSignIn();
  } else await showAccounts();
}

function showFatal(error: unknown, retry: () => Promise<void>): void {
  const button = h('button', { type: 'button' }, 'Try again');
  button.addEventListener('click', () => void retry());
  fill(
    root,
    h(
      'div',
      { class: 'panel error', role: 'alert' },
      h('h2', {}, 'The dashboard could not load'),
      h('p', {}, errorText(error)),
      button,
    ),
  );
}

/**
 * The admin token leaves the page once, in the body of `POST /dashboard/session`; the answer is the
 * session cookie. The field is emptied whatever the outcome. Without JavaScript the same form posts
 * itself and the server answers with the cookie and a redirect.
 */
function showSignIn(): void {
  signOut.hidden = true;
  const id = uid('token');
  const errorId = uid('error');
  const input = h('input', {
    id,
    name: 'token',
    type: 'password',
    autocomplete: 'current-password',
    required: true,
    autofocus: true,
    'aria-describedby': errorId,
  });
  const error = h('p', { id: errorId, class: 'field-error' });
  const submit = h('button', { type: 'submit' }, 'Sign in');
  const form = h(
    'form',
    { class: 'panel sign-in', method: 'post', action: '/dashboard/session' },
    h('h2', {}, 'Sign in'),
    h(
      'p',
      {},
      'Paste the admin token (the one whose SHA-256 is TOLLGATE_ADMIN_TOKEN_SHA256). ' +
        'It is sent once; the browser keeps only a session cookie.',
    ),
    h('label', { for: id }, 'Admin token'),
    input,
    error,
    submit,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const token = input.value;
    input.value = '';
    error.textContent = '';
    input.removeAttribute('aria-invalid');
    submit.disabled = true;
    api.signIn(token).then(
      (opened) => {
        session = opened;
        rememberSignedIn(true);
        announce('Signed in.');
        void showAccounts();
      },
      (failure: unknown) => {
        submit.disabled = false;
        error.textContent =
          failure instanceof ApiError && failure.status === 401
            ? 'That is not the admin token.'
            : errorText(failure);
        input.setAttribute('aria-invalid', 'true');
        input.focus();
        announce(`Not signed in: ${error.textContent}`);
      },
    );
  });
  fill(root, form);
  input.focus();
}

async function showAccounts(): Promise<void> {
  fill(root, h('p', { class: 'loading', 'aria-busy': 'true' }, 'Loading accounts…'));
  try {
    accounts = await api.accounts();
  } catch (error) {
    if (signedOut(error)) return;
    showFatal(error, showAccounts);
    return;
  }
  render();
}

/** A 401 after sign-in means the session ended: back to the sign-in form. */
function signedOut(error: unknown): boolean {
  if (!(error instanceof ApiError) || error.status !== 401) return false;
  session = undefined;
  rememberSignedIn(false);
  showSignIn();
  announce('Your session has ended. Sign in again.');
  return true;
}

function writable(): boolean {
  return session?.read_only === null;
}

function render(): void {
  signOut.hidden = false;
  const list = h('nav', { class: 'panel accounts', 'aria-label': 'Accounts' });
  const detail = h('section', { class: 'panel detail', 'aria-live': 'polite' });
  fill(root, session?.read_only ? readOnlyNotice(session.read_only) : null, list, detail);
  renderList(list, detail);
  renderDetail(detail);
}

function readOnlyNotice(reason: string): HTMLElement {
  return h('p', { class: 'notice', role: 'note' }, h('strong', {}, 'Read-only. '), reason);
}

function renderList(list: HTMLElement, detail: HTMLElement): void {
  const filterId = uid('filter');
  const input = h('input', { id: filterId, type: 'search', value: filter, autocomplete: 'off' });
  const items = h('ul', { class: 'account-list' });
  const draw = (): void => {
    const shown = accounts.filter((account) => account.id.includes(filter));
    fill(
      items,
      ...shown.map((account) => {
        const button = h(
          'button',
          {
            type: 'button',
            class: 'account',
            'aria-current': account.id === selected ? 'true' : undefined,
          },
          h('span', { class: 'account-id' }, account.id),
          h(
            'span',
            { class: 'count' },
            `${account.keys.length} key${account.keys.length === 1 ? '' : 's'}`,
          ),
        );
        button.addEventListener('click', () => {
          selected = account.id;
          draw();
          renderDetail(detail);
          detail.querySelector('h2')?.focus();
        });
        return h('li', {}, button);
      }),
    );
    if (accounts.length === 0) {
      fill(
        items,
        h(
          'li',
          { class: 'empty' },
          writable() ? 'No accounts yet: create the first one below.' : 'No accounts.',
        ),
      );
    } else if (shown.length === 0) {
      fill(items, h('li', { class: 'empty' }, 'No account matches the filter.'));
    }
  };
  input.addEventListener('input', () => {
    filter = input.value.trim();
    draw();
  });
  fill(
    list,
    h('h2', {}, 'Accounts'),
    h('label', { for: filterId }, 'Filter accounts'),
    input,
    items,
    writable() && createAccountForm(),
  );
  draw();
}

function createAccountForm(): HTMLElement {
  const id = uid('new-account');
  const errorId = uid('error');
  const input = h('input', {
    id,
    required: true,
    pattern: '[A-Za-z0-9_\\-]{1,64}',
    'aria-describedby': errorId,
  });
  const error = h('p', { id: errorId, class: 'field-error' });
  const form = h(
    'form',
    { class: 'create-account' },
    h('label', { for: id }, 'New account id'),
    input,
    error,
    h('button', { type: 'submit' }, 'Create account'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    act(async () => {
      const account = await api.createAccount(input.value.trim());
      selected = account.id;
      await reload(`Account ${account.id} created.`);
    }, error);
  });
  return form;
}

/** Runs a change; its error goes beside the control (`where`), a 401 back to sign-in. */
function act(
  change: () => Promise<void>,
  where: HTMLElement,
  onError?: (error: ApiError) => boolean,
): void {
  where.textContent = '';
  change().catch((error: unknown) => {
    if (signedOut(error)) return;
    if (error instanceof ApiError && onError?.(error) === true) return;
    where.textContent = errorText(error);
    announce(`Not saved: ${errorText(error)}`);
  });
}

async function reload(message: string): Promise<void> {
  accounts = await api.accounts();
  render();
  announce(message);
}

function renderDetail(detail: HTMLElement): void {
  const account = accounts.find((candidate) => candidate.id === selected);
  if (account === undefined) {
    fill(
      detail,
      h('h2', { tabindex: '-1' }, 'No account selected'),
      h(
        'p',
        { class: 'empty' },
        accounts.length === 0
          ? 'There is nothing to show yet.'
          : 'Choose an account to see its keys, whitelist, limits and traffic.',
      ),
    );
    return;
  }
  const usage = h('div', { class: 'usage', 'aria-busy': 'true' }, 'Loading limits…');
  const chart = h('div', { class: 'chart-box', 'aria-busy': 'true' }, 'Loading decisions…');
  fill(
    detail,
    h('h2', { tabindex: '-1' }, `Account ${account.id}`),
    keysSection(account),
    whitelistSection(account),
    h('section', {}, h('h3', {}, 'Limits in the current window'), usage),
    h('section', {}, h('h3', {}, 'Decisions, last 15 minutes (this instance)'), chart),
  );
  void loadUsage(account, usage);
  api.decisions(account.id).then(
    ({ minutes }) => {
      fill(chart, decisionChart(minutes));
      chart.removeAttribute('aria-busy');
    },
    (error: unknown) => {
      fill(chart, h('p', { class: 'field-error' }, errorText(error)));
      chart.removeAttribute('aria-busy');
    },
  );
}

function keysSection(account: AccountView): HTMLElement {
  const secret = h('div', { class: 'secret-box' });
  const rows = account.keys.map((key) => keyRow(key, secret));
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
                  writable() ? 'Actions' : '',
                ].map((name) => (name === '' ? null : h('th', { scope: 'col' }, name))),
              ),
            ),
            h('tbody', {}, ...rows),
          ),
        );
  return h(
    'section',
    {},
    h('h3', {}, 'Keys'),
    table,
    secret,
    writable() && createKeyForm(account, secret),
  );
}

function keyRow(key: KeyView, secret: HTMLElement): HTMLElement {
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
    writable() && h('td', { class: 'actions' }, ...(key.revoked ? [] : keyActions(key, secret))),
  );
}

function keyActions(key: KeyView, secret: HTMLElement): HTMLElement[] {
  const roleId = uid('role');
  const error = h('p', { class: 'field-error', id: uid('error') });
  const role = h(
    'select',
    { id: roleId, 'aria-describedby': error.id },
    ...ROLES.map((name) => h('option', { value: name, selected: name === key.role }, name)),
  );
  const saveRole = h('button', { type: 'button' }, 'Change role');
  saveRole.addEventListener('click', () => {
    act(async () => {
      await api.setRole(key.id, role.value);
      await reload(`Key ${key.id} is now ${role.value}.`);
    }, error);
  });
  const graceId = uid('grace');
  const grace = h('input', {
    id: graceId,
    type: 'number',
    min: '0',
    max: '604800',
    value: '86400',
    inputmode: 'numeric',
    'aria-describedby': error.id,
  });
  const roll = h('button', { type: 'button' }, 'Roll');
  roll.addEventListener('click', () => {
    act(async () => {
      const rolled = await api.roll(key.id, Number(grace.value));
      await reload(`Key ${key.id} rolled: the new key is ${rolled.id}.`);
      showSecret(
        document.querySelector('.secret-box') ?? secret,
        rolled,
        `Rolled ${key.id}; the old key stops after ${grace.value} s.`,
      );
    }, error);
  });
  const revoke = h('button', { type: 'button', class: 'danger' }, 'Revoke…');
  revoke.addEventListener('click', () => {
    confirmRevoke(key, revoke, error);
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

/** A modal that names the key; Cancel has the focus first, so Enter alone revokes nothing. */
function confirmRevoke(key: KeyView, opener: HTMLElement, error: HTMLElement): void {
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
    opener.focus();
  };
  cancel.addEventListener('click', close);
  dialog.addEventListener('cancel', (event) => {
    event.preventDefault();
    close();
  });
  confirm.addEventListener('click', () => {
    dialog.close();
    dialog.remove();
    act(async () => {
      await api.revoke(key.id);
      await reload(`Key ${key.id} revoked.`);
    }, error);
  });
  document.body.append(dialog);
  dialog.showModal();
  cancel.focus();
}

function createKeyForm(account: AccountView, secret: HTMLElement): HTMLElement {
  const roleId = uid('new-role');
  const error = h('p', { class: 'field-error', id: uid('error') });
  const role = h(
    'select',
    { id: roleId },
    ...ROLES.map((name) => h('option', { value: name, selected: name === 'level-1' }, name)),
  );
  const form = h(
    'form',
    { class: 'create-key' },
    h('label', { for: roleId }, 'Role of the new key'),
    role,
    h('button', { type: 'submit' }, 'Create key'),
    error,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    act(async () => {
      const created = await api.createKey(account.id, role.value);
      await reload(`Key ${created.id} created.`);
      showSecret(
        document.querySelector('.secret-box') ?? secret,
        created,
        `Key ${created.id} created.`,
      );
    }, error);
  });
  return form;
}

/** The one time a secret is shown: it lives in this element until the next reload. */
function showSecret(box: Element, key: NewKey, title: string): void {
  const id = uid('secret');
  const input = h('input', {
    id,
    readonly: true,
    value: key.secret_key,
    class: 'secret',
    spellcheck: 'false',
  });
  const copy = h('button', { type: 'button' }, 'Copy secret');
  const copied = h('span', { class: 'copied', role: 'status' });
  copy.addEventListener('click', () => {
    input.select();
    navigator.clipboard.writeText(key.secret_key).then(
      () => {
        copied.textContent = 'Copied.';
      },
      () => {
        copied.textContent = 'Selected: press Ctrl+C to copy.';
      },
    );
  });
  fill(
    box,
    h(
      'div',
      { class: 'panel secret-shown', role: 'region', 'aria-label': 'New secret key' },
      h('p', {}, h('strong', {}, title), ' Its secret is shown this once: store it now.'),
      h('p', {}, 'Publishable key: ', h('code', {}, key.publishable_key)),
      h('label', { for: id }, 'Secret key'),
      input,
      copy,
      copied,
    ),
  );
  copy.focus();
}

function whitelistSection(account: AccountView): HTMLElement {
  const list = account.ip_whitelist;
  const summary =
    list === null
      ? h('p', {}, 'Not restricted: secret-key requests are accepted from any address.')
      : h('p', {}, `Secret-key requests only from: ${list.join(', ') || 'nowhere (empty list)'}.`);
  if (!writable()) return h('section', {}, h('h3', {}, 'IP whitelist'), summary);
  const entries = h('ol', { class: 'entries' });
  const formError = h('p', { class: 'field-error', id: uid('error') });
  const addEntry = (value: string): void => {
    const id = uid('entry');
    const errorId = uid('error');
    const input = h('input', {
      id,
      value,
      class: 'entry',
      autocomplete: 'off',
      'aria-describedby': errorId,
      placeholder: '203.0.113.0/24',
    });
    const remove = h(
      'button',
      { type: 'button', 'aria-label': `Remove entry ${value || 'new'}` },
      'Remove',
    );
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
    entries.append(item);
  };
  for (const entry of list ?? []) addEntry(entry);
  const add = h('button', { type: 'button' }, 'Add entry');
  add.addEventListener('click', () => {
    addEntry('');
    const inputs = entries.querySelectorAll('input');
    inputs[inputs.length - 1]?.focus();
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
  const clearErrors = (): void => {
    for (const input of inputs()) {
      input.removeAttribute('aria-invalid');
      const error = document.getElementById(input.getAttribute('aria-describedby') ?? '');
      if (error !== null) error.textContent = '';
    }
  };
  /** The server names the entry at fault (`entries[2]: …`): its message goes beside it. */
  const besideEntry = (error: ApiError): boolean => {
    const match = /^entries\[(\d+)\]: (.*)$/.exec(error.message);
    const input = match === null ? undefined : inputs()[Number(match[1])];
    if (match === null || input === undefined) return false;
    input.setAttribute('aria-invalid', 'true');
    const beside = document.getElementById(input.getAttribute('aria-describedby') ?? '');
    if (beside !== null) beside.textContent = match[2] ?? error.message;
    input.focus();
    announce(`Not saved: entry ${Number(match[1]) + 1}: ${match[2] ?? ''}`);
    return true;
  };
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    clearErrors();
    const values = inputs().map((input) => input.value.trim());
    act(
      async () => {
        await api.setWhitelist(account.id, values);
        await reload(`Whitelist of ${account.id} saved.`);
      },
      formError,
      besideEntry,
    );
  });
  lift.addEventListener('click', () => {
    clearErrors();
    act(async () => {
      await api.setWhitelist(account.id, null);
      await reload(`Whitelist of ${account.id} lifted.`);
    }, formError);
  });
  return h('section', {}, h('h3', {}, 'IP whitelist'), summary, form);
}

async function loadUsage(account: AccountView, box: HTMLElement): Promise<void> {
  let scopes;
  try {
    scopes = (await api.usage(account.id)).scopes;
  } catch (error) {
    fill(box, h('p', { class: 'field-error' }, errorText(error)));
    box.removeAttribute('aria-busy');
    return;
  }
  box.removeAttribute('aria-busy');
  if (scopes.length === 0) {
    fill(box, h('p', { class: 'empty' }, 'No per-account limit applies to this account.'));
    return;
  }
  const inputs = new Map<string, HTMLInputElement>();
  const error = h('p', { class: 'field-error', id: uid('error') });
  const rows = scopes.map((scope) => {
    const id = uid('limit');
    const own = account.limits?.[scope.scope];
    const input = h('input', {
      id,
      type: 'number',
      min: '1',
      inputmode: 'numeric',
      value: own === undefined ? '' : String(own),
      placeholder: 'default',
      'aria-describedby': error.id,
    });
    inputs.set(scope.scope, input);
    const used =
      scope.limit === 0 ? 0 : Math.round((100 * (scope.limit - scope.remaining)) / scope.limit);
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
      writable()
        ? h(
            'td',
            {},
            h(
              'label',
              { for: id, class: 'visually-hidden' },
              `Own limit per minute for ${scope.scope}`,
            ),
            input,
          )
        : null,
    );
  });
  const table = h(
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
          h('th', { scope: 'col' }, 'Resets in'),
          writable() ? h('th', { scope: 'col' }, 'Own limit per minute') : null,
        ),
      ),
      h('tbody', {}, ...rows),
    ),
  );
  if (!writable()) {
    fill(box, table);
    return;
  }
  const form = h(
    'form',
    { class: 'limits' },
    table,
    h('button', { type: 'submit' }, 'Save limits'),
    error,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const limits: Record<string, number> = {};
    for (const [scope, input] of inputs) {
      if (input.value.trim() !== '') limits[scope] = Number(input.value);
    }
    act(async () => {
      await api.setLimits(account.id, Object.keys(limits).length === 0 ? null : limits);
      await reload(`Limits of ${account.id} saved.`);
    }, error);
  });
  fill(box, form);
}

function signOutButton(): void {
  signOut.addEventListener('click', () => {
    api.signOut().then(
      () => {
        session = undefined;
        rememberSignedIn(false);
        showSignIn();
        announce('Signed out.');
      },
      (error: unknown) => {
        announce(errorText(error));
      },
    );
  });
}

signOutButton();
void start();
