import { generateSync } from 'json-schema-faker';

import { errorOf } from '../../http/errors.js';
import { MODEL_ERRORS } from '../errors.js';

// Structured output for the built-in model `svc-local`: with OpenAI's `response_format`
// of `json_object` or `json_schema`, its answer is JSON, so structured-output clients (the AI SDK's
// generateObject, LangChain's withStructuredOutput, `response_format` in the OpenAI SDKs) work on a fresh
// machine. A `json_schema` answer is a value generated from the caller's schema by json-schema-faker with a
// fixed seed: deterministic, and valid for the schemas those clients send (objects, arrays, enums, formats,
// patterns, local $refs). A schema no value can satisfy (minimum above maximum, say) gets a best effort.

/** OpenAI's `response_format` (chat) and the Responses API's `text.format`, as the schema admits them. */
export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema: { name: string; schema?: Record<string, unknown> } };

// The caller's schema decides how much is generated (`minItems: 10000000` took 85 s and 80 MB in a
// trial), so its least size is bounded before anything is generated: at most this many strings, numbers
// and characters in all, counting every array's least length along the way down.
const MAX_GENERATED_SIZE = 100_000;
// Recursive schemas ($ref to an enclosing schema) are followed this many times, by the bound and by the
// generator alike.
const REF_DEPTH = 2;
// A pattern's counted repetition (`a{1000000}`) is generated character by character.
const MAX_PATTERN_REPEAT = 1_000;

const tooLarge = () =>
  errorOf(
    MODEL_ERRORS,
    'INVALID_REQUEST_ERROR',
    `response_format.json_schema asks for more than ${MAX_GENERATED_SIZE} values or characters at least`,
    { param: 'response_format' },
  );

/** The JSON text svc-local answers with for `format`, or null when the format is plain text. */
export function structuredAnswer(format: ResponseFormat | null | undefined, reply: string): string | null {
  if (!format || format.type === 'text') return null;
  const value = format.type === 'json_object' ? { reply } : valueFor(format.json_schema.schema ?? {});
  // Indented, so the answer streams and counts as words (svc-local counts one token per word).
  return JSON.stringify(value, null, 2);
}

function valueFor(schema: Record<string, unknown>): unknown {
  leastSize(schema, { root: schema, visits: 0 }, 0);
  try {
    return generateSync(schema, {
      seed: 1,
      optionalsProbability: 0,
      maxItems: 3,
      refDepthMax: REF_DEPTH,
      useDefaultValue: true,
    });
  } catch (err) {
    // The generator refuses what it cannot read (a remote $ref, an unknown type): the caller's schema.
    throw errorOf(
      MODEL_ERRORS,
      'INVALID_REQUEST_ERROR',
      `response_format.json_schema.schema: ${(err as Error).message}`,
      { param: 'response_format' },
    );
  }
}

interface Walk {
  root: Record<string, unknown>;
  /** Subschemas visited so far: a schema of many $refs to one large definition is refused, not walked. */
  visits: number;
}

/**
 * A lower bound of how many values and characters any value of `schema` has, following local $refs up to
 * REF_DEPTH times; throws as soon as it passes MAX_GENERATED_SIZE. Over-counts on purpose (every property,
 * every branch, unused definitions): it only has to be cheap and safe.
 */
function leastSize(schema: unknown, walk: Walk, refs: number): number {
  if (++walk.visits > MAX_GENERATED_SIZE) throw tooLarge();
  if (!schema || typeof schema !== 'object' || Array.isArray(schema)) return 1;
  const s = schema as Record<string, unknown>;
  const n = (key: string) => (typeof s[key] === 'number' && Number.isFinite(s[key]) ? s[key] : 0);
  let size = 1 + n('minLength') + n('minProperties');
  if (typeof s.pattern === 'string') size += patternRepeat(s.pattern);
  if (typeof s.$ref === 'string' && s.$ref.startsWith('#') && refs < REF_DEPTH) {
    size += leastSize(resolvePointer(walk.root, s.$ref), walk, refs + 1);
  }
  const items = Math.max(n('minItems'), n('minContains'), 3);
  for (const key of ['items', 'contains', 'additionalItems']) {
    if (s[key] !== undefined) size += items * leastSize(s[key], walk, refs);
  }
  for (const key of ['prefixItems', 'allOf', 'anyOf', 'oneOf']) {
    if (Array.isArray(s[key])) for (const sub of s[key]) size += leastSize(sub, walk, refs);
  }
  for (const key of ['properties', 'patternProperties', '$defs', 'definitions']) {
    const map = s[key];
    if (map && typeof map === 'object')
      for (const sub of Object.values(map)) size += leastSize(sub, walk, refs);
  }
  for (const key of ['not', 'if', 'then', 'else', 'additionalProperties']) {
    if (s[key] !== undefined) size += leastSize(s[key], walk, refs);
  }
  if (size > MAX_GENERATED_SIZE) throw tooLarge();
  return size;
}

/** The largest counted repetition in a regular expression, refused above MAX_PATTERN_REPEAT. */
function patternRepeat(pattern: string): number {
  let most = 0;
  for (const m of pattern.matchAll(/\{(\d+)(?:,(\d*))?\}/g)) most = Math.max(most, Number(m[1]));
  if (most > MAX_PATTERN_REPEAT) throw tooLarge();
  return most;
}

/** The value at a JSON Pointer fragment (RFC 6901) of the root schema, or undefined. */
function resolvePointer(root: Record<string, unknown>, ref: string): unknown {
  let at: unknown = root;
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (!at || typeof at !== 'object') return undefined;
    at = (at as Record<string, unknown>)[key];
  }
  return at;
}
