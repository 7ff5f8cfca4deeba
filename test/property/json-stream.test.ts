import fc from 'fast-check';
import { DuplicateFieldError, JsonFieldStream, JsonSyntaxError } from '../../lib/keys/json-stream';

/**
 * The keys file's streaming reader against `JSON.parse`, on random documents cut into random
 * chunks: it hands over exactly what `JSON.parse` of the whole text gives, and refuses every text
 * `JSON.parse` refuses.
 */

const RUNS = 400;

/** What the reader handed over, or why it refused. */
interface Seen {
  readonly elements: unknown[];
  readonly fields: [string, unknown][];
  readonly root: unknown[];
}

function read(text: string, cuts: readonly number[]): Seen | JsonSyntaxError | DuplicateFieldError {
  const seen: Seen = { elements: [], fields: [], root: [] };
  const stream = new JsonFieldStream('accounts', {
    element: (value, index) => {
      expect(index).toBe(seen.elements.length);
      seen.elements.push(value);
    },
    field: (name, value) => {
      seen.fields.push([name, value]);
      seen.fields.sort(byName);
    },
    root: (value) => seen.root.push(value),
  });
  const bytes = Buffer.from(text);
  const points = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b);
  // one buffer for every chunk, as the file reader does: the reader must copy what it keeps
  const chunk = Buffer.alloc(bytes.length);
  try {
    let from = 0;
    for (const point of [...points, bytes.length]) {
      bytes.copy(chunk, 0, from, point);
      stream.write(chunk.subarray(0, point - from));
      chunk.fill(0x20);
      from = point;
    }
    stream.end();
  } catch (error) {
    if (error instanceof JsonSyntaxError || error instanceof DuplicateFieldError) return error;
    throw error;
  }
  return seen;
}

/** Fields by name: `Object.entries()` lists integer-like names first, the reader in file order. */
function byName([a]: [string, unknown], [b]: [string, unknown]): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** What the reader should hand over for a text `JSON.parse` accepts. */
function expected(parsed: unknown): Seen {
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { elements: [], fields: [], root: [parsed] };
  }
  const fields = Object.entries(parsed);
  const accounts = (parsed as { accounts?: unknown }).accounts;
  return Array.isArray(accounts)
    ? {
        elements: accounts as unknown[],
        fields: fields.filter(([name]) => name !== 'accounts').sort(byName),
        root: [],
      }
    : { elements: [], fields: fields.sort(byName), root: [] };
}

function parsedOrRefused(text: string): { value: unknown } | 'refused' {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch {
    return 'refused';
  }
}

const spacing = fc.constantFrom<string | number | undefined>(undefined, 0, 1, 2, '\t', ' \r\n');

const accountsArrays = fc.record({
  accounts: fc.array(fc.jsonValue({ maxDepth: 4 }), { maxLength: 8 }),
});

const documents = fc
  .tuple(
    fc.oneof(
      accountsArrays,
      fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 4 }),
      fc.jsonValue({ maxDepth: 3 }),
    ),
    fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
    spacing,
  )
  .map(([main, extra, space]) => {
    const value =
      typeof main === 'object' && main !== null && !Array.isArray(main)
        ? { ...extra, ...main }
        : main;
    return JSON.stringify(value, null, space);
  });

const cuts = fc.array(fc.nat(), { maxLength: 12 });

describe('JsonFieldStream', () => {
  it('hands over what JSON.parse gives, wherever the chunks are cut', () => {
    fc.assert(
      fc.property(documents, cuts, (text, at) => {
        const parsed = parsedOrRefused(text);
        if (parsed === 'refused') throw new Error('the generator made invalid JSON');
        expect(read(text, at)).toEqual(expected(parsed.value));
      }),
      { numRuns: RUNS },
    );
  });

  it('refuses every text JSON.parse refuses, and hands over the same for the others', () => {
    const mutated = fc
      .tuple(
        documents,
        fc.nat(),
        fc.nat(),
        fc.constantFrom('', ',', '"', '\\', '[', ']', '{', '}', ':', '1', ' ', 'x'),
      )
      .map(([text, at, length, insert]) => {
        const start = at % (text.length + 1);
        return text.slice(0, start) + insert + text.slice(start + (length % 3));
      });
    fc.assert(
      fc.property(fc.oneof(mutated, fc.string()), cuts, (text, at) => {
        const parsed = parsedOrRefused(text);
        const seen = read(text, at);
        if (parsed === 'refused') expect(seen).toBeInstanceOf(Error);
        else if (!(seen instanceof DuplicateFieldError))
          expect(seen).toEqual(expected(parsed.value));
      }),
      { numRuns: RUNS * 5 },
    );
  });

  it.each([
    '{"accounts":[{} x}',
    '{"accounts":[1 2]}',
    '{"accounts":[1,]}',
    '{"accounts":[,1]}',
    '{"a":1 "b":2}',
    '{"a" 1}',
    '{"a":1,}',
    '{a:1}',
    '{"accounts":[]}}',
    '{"accounts":[]',
  ])('refuses %j between values, where only its own walk can see it', (text) => {
    expect(parsedOrRefused(text)).toBe('refused');
    expect(read(text, [])).toBeInstanceOf(JsonSyntaxError);
  });

  it('refuses a root field named twice, escaped or not', () => {
    for (const text of ['{"a":1,"a":2}', '{"accounts":[],"\\u0061ccounts":[]}']) {
      expect(read(text, [])).toBeInstanceOf(DuplicateFieldError);
    }
  });
});
