import type { NextFunction, Request, Response } from 'express';
import { ConfigurationError, InsufficientRoleError, MisconfigurationError } from '../../lib/errors';
import { toTollgateError } from '../../lib/express/error-handler';
import {
  isRole,
  OWNER_ROLE,
  parseRole,
  type Role,
  roleSatisfies,
  ROLES,
} from '../../lib/model/roles';
import { requireRole } from '../../lib/express/access';
import type { AuthContext } from '../../lib/types';

const VALID_ROLES_TEXT = 'level-1, level-2, level-3, administrator';

function requestWithRole(role: Role | undefined): Request {
  const auth: AuthContext | undefined =
    role === undefined
      ? undefined
      : { accountId: 'acct_x', keyId: 'key_x', role, credential: 'secret' };
  return { auth } as unknown as Request;
}

/** Runs a middleware on a plain request object and returns what it passed to `next`. */
function run(middleware: ReturnType<typeof requireRole>, req: Request): unknown[] {
  const next = jest.fn<unknown, unknown[]>();
  void middleware(req, {} as unknown as Response, next as NextFunction);
  expect(next).toHaveBeenCalledTimes(1);
  return next.mock.calls[0] ?? [];
}

describe('ROLES', () => {
  it('lists the four roles lowest first, and a key without a role is the owner (administrator)', () => {
    expect(ROLES).toEqual(['level-1', 'level-2', 'level-3', 'administrator']);
    expect(OWNER_ROLE).toBe('administrator');
  });

  it.each([
    ['level-1', true],
    ['administrator', true],
    ['Administrator', false],
    ['level-4', false],
    ['', false],
    [undefined, false],
    [2, false],
  ])('isRole(%p) is %p', (value, expected) => {
    expect(isRole(value)).toBe(expected);
  });
});

describe('roleSatisfies', () => {
  const matrix: [Role, Role, boolean][] = ROLES.flatMap((actual, actualRank) =>
    ROLES.map((required, requiredRank): [Role, Role, boolean] => [
      actual,
      required,
      actualRank >= requiredRank,
    ]),
  );

  it('covers every pair of roles', () => {
    expect(matrix).toHaveLength(16);
    expect(matrix.filter(([, , satisfied]) => satisfied)).toHaveLength(10);
  });

  it.each([
    ['level-1', 'level-1', true],
    ['level-1', 'level-2', false],
    ['level-1', 'level-3', false],
    ['level-1', 'administrator', false],
    ['level-2', 'level-1', true],
    ['level-2', 'level-2', true],
    ['level-2', 'level-3', false],
    ['level-2', 'administrator', false],
    ['level-3', 'level-1', true],
    ['level-3', 'level-2', true],
    ['level-3', 'level-3', true],
    ['level-3', 'administrator', false],
    ['administrator', 'level-1', true],
    ['administrator', 'level-2', true],
    ['administrator', 'level-3', true],
    ['administrator', 'administrator', true],
  ] as [Role, Role, boolean][])('a %s key on a %s action: %p', (actual, required, expected) => {
    expect(roleSatisfies(actual, required)).toBe(expected);
    expect(matrix).toContainEqual([actual, required, expected]);
  });
});

describe('parseRole', () => {
  it('returns a valid role unchanged', () => {
    expect(parseRole('level-2', 'somewhere')).toBe('level-2');
  });

  it.each([['admin'], ['LEVEL-1'], [''], [null], [3]])(
    'refuses %p with a ConfigurationError naming the place and every valid role',
    (value) => {
      let thrown: unknown;
      try {
        parseRole(value, 'accounts[0].keys[1].role');
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(ConfigurationError);
      const message = (thrown as Error).message;
      expect(message.startsWith('accounts[0].keys[1].role')).toBe(true);
      expect(message).toContain(JSON.stringify(value));
      expect(message).toContain(VALID_ROLES_TEXT);
    },
  );
});

describe('requireRole', () => {
  it('throws at creation for a misspelt role, naming the valid roles', () => {
    expect(() => requireRole('admn' as never)).toThrow(ConfigurationError);
    expect(() => requireRole('admn' as never)).toThrow(
      /requireRole\(\).*"admn".*level-1, level-2, level-3, administrator/,
    );
  });

  const cases: [Role, Role, boolean][] = ROLES.flatMap((minimum) =>
    ROLES.map((actual): [Role, Role, boolean] => [
      minimum,
      actual,
      ROLES.indexOf(actual) >= ROLES.indexOf(minimum),
    ]),
  );

  it.each(cases)('requireRole(%s) with role %p admits: %p', (minimum, actual, admitted) => {
    const args = run(requireRole(minimum), requestWithRole(actual));
    if (admitted) {
      expect(args).toEqual([]);
      return;
    }
    expect(args).toHaveLength(1);
    const error = args[0];
    expect(error).toBeInstanceOf(InsufficientRoleError);
    expect(error).toMatchObject({ status: 403, code: 'insufficient_role' });
    expect((error as Error).message).toContain(minimum);
  });

  it('fails closed, as a misconfiguration naming the step, on a request authenticate() has not seen', () => {
    for (const minimum of ROLES) {
      const [error] = run(requireRole(minimum), requestWithRole(undefined));
      expect(error).toBeInstanceOf(MisconfigurationError);
      expect(error).toMatchObject({ code: 'requireRole_before_authenticate' });
      expect(toTollgateError(error)).toMatchObject({ status: 500, code: 'internal_error' });
    }
  });
});
