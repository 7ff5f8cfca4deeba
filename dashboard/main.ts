import type { ListedAccountAnswer, SessionAnswer } from '../gateway/admin/answers';
import { Api, ApiError } from './api';
import { decisionChart } from './chart';
import { byId, fill, h, uid } from './dom';
import { keysSection } from './keys-section';
import { errorText, type Change, type ShownSecret, type Ui } from './ui';
import { usageSection } from './usage-section';
import { whitelistSection } from './whitelist-section';

/**
 * The operators' dashboard: sign-in, accounts and their keys, and with the database
 * key store the changes: create, roll, revoke, role, IP whitelist, limits. Every change is a call
 * of the admin API (api.ts) made through `change()`, then the page is drawn again from the
 * server's state. The page keeps nothing but what it shows, and a new secret only until it is
 * reloaded or another account is chosen.
 */

const api = new Api();
const root = byId('app');
const live = byId('live');
const signOut = byId('sign-out');

let session: SessionAnswer | undefined;
let accounts: readonly ListedAccountAnswer[] = [];
let selected: string | undefined;
let filter = '';
/** The secret of the key just created or rolled, shown once in its account's keys. */
let secret: ShownSecret | undefined;
/** A change is on its way: no other starts meanwhile. */
let busy = false;

/** Says `message` to screen readers and shows it in the status line. */
function announce(message: string): void {
  live.textContent = message;
}

const ui: Ui = {
  api,
  get writable() {
    return session?.read_only === null;
  },
  change: (made) => void change(made),
  announce,
  secretFor: (account) => (secret?.accountId === account.id ? secret : undefined),
};

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
 * session cookie. The field is emptied whatever the outcome, and the browser is not invited to
 * save what was typed.
 */
function showSignIn(): void {
  signOut.hidden = true;
  const id = uid('token');
  const errorId = uid('error');
  const input = h('input', {
    id,
    name: 'token',
    type: 'password',
    autocomplete: 'off',
    required: true,
    autofocus: true,
    'aria-describedby': errorId,
  });
  const error = h('p', { id: errorId, class: 'field-error' });
  const submit = h('button', { type: 'submit' }, 'Sign in');
  const form = h(
    'form',
    { class: 'panel sign-in' },
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
    if (await sessionEnded(error)) return;
    showFatal(error, showAccounts);
    return;
  }
  render();
}

/** Forgets the session here and shows the sign-in form, saying why. */
function signedOut(message: string): void {
  session = undefined;
  secret = undefined;
  accounts = [];
  rememberSignedIn(false);
  showSignIn();
  announce(message);
}

/**
 * Whether `error` means the session is over: a 401, or a change refused as `forbidden_origin`
 * (what a change made with an ended session's cookie answers) when the server has no session for
 * this browser any more. Then the sign-in form is back.
 */
async function sessionEnded(error: unknown): Promise<boolean> {
  if (!(error instanceof ApiError)) return false;
  const over =
    error.status === 401 ||
    (error.status === 403 &&
      error.code === 'forbidden_origin' &&
      (await api.session().catch(() => session)) === undefined);
  if (over) signedOut('Your session has ended. Sign in again.');
  return over;
}

/**
 * Makes a change: its control disabled meanwhile, a refusal shown beside it; once the server took
 * it, the page is drawn again from the server's state and the focus goes to the new secret's Copy
 * button, or to the account's heading.
 */
async function change(made: Change): Promise<void> {
  if (busy) return;
  busy = true;
  made.control.disabled = true;
  made.errorBox.textContent = '';
  let outcome;
  try {
    outcome = await made.run();
  } catch (error) {
    busy = false;
    made.control.disabled = false;
    if (await sessionEnded(error)) return;
    if (error instanceof ApiError && made.onError?.(error) === true) return;
    made.errorBox.textContent = errorText(error);
    announce(`Not saved: ${errorText(error)}`);
    return;
  }
  secret = outcome.secret ?? secret;
  let refreshed = '';
  try {
    accounts = await api.accounts();
  } catch (error) {
    if (await sessionEnded(error)) return;
    refreshed = ` The list could not be refreshed: ${errorText(error)}`;
  } finally {
    busy = false;
  }
  render();
  announce(`${outcome.message}${refreshed}`);
  const focus =
    outcome.secret === undefined
      ? root.querySelector<HTMLElement>('.detail h2')
      : root.querySelector<HTMLElement>('.copy-secret');
  focus?.focus();
}

function render(): void {
  signOut.hidden = false;
  const list = h('nav', { class: 'panel accounts', 'aria-label': 'Accounts' });
  const detail = h('section', { class: 'panel detail' });
  const reason = session?.read_only;
  fill(root, reason && readOnlyNotice(reason), list, detail);
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
          if (selected !== account.id) secret = undefined;
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
          ui.writable ? 'No accounts yet: create the first one below.' : 'No accounts.',
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
    ui.writable && createAccountForm(),
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
    autocomplete: 'off',
    'aria-describedby': errorId,
  });
  const error = h('p', { id: errorId, class: 'field-error' });
  const submit = h('button', { type: 'submit' }, 'Create account');
  const form = h(
    'form',
    { class: 'create-account' },
    h('label', { for: id }, 'New account id'),
    input,
    error,
    submit,
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void change({
      control: submit,
      errorBox: error,
      run: async () => {
        const account = await api.createAccount(input.value.trim());
        selected = account.id;
        secret = undefined;
        return { message: `Account ${account.id} created.` };
      },
    });
  });
  return form;
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
  fill(
    detail,
    h('h2', { tabindex: '-1' }, `Account ${account.id}`),
    keysSection(ui, account),
    whitelistSection(ui, account),
    usageSection(ui, account),
    decisionsSection(account),
  );
}

/** The account's last 15 minutes on this instance, drawn once they arrive. */
function decisionsSection(account: ListedAccountAnswer): HTMLElement {
  const chart = h('div', { class: 'chart-box', 'aria-busy': 'true' }, 'Loading decisions…');
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
  return h('section', {}, h('h3', {}, 'Decisions, last 15 minutes (this instance)'), chart);
}

signOut.addEventListener('click', () => {
  api.signOut().then(
    () => {
      signedOut('Signed out.');
    },
    async (error: unknown) => {
      if (!(await sessionEnded(error))) announce(`Not signed out: ${errorText(error)}`);
    },
  );
});

void start();
