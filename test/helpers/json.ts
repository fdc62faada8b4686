import { expect } from 'vitest';
import type { z } from 'zod';
import { detailError, jsonRpcError, oauthError, openAiError } from '../../src/openapi/describe.js';

// Typed readers for JSON answers. A JSON body arrives as `unknown` (or `any` from `res.json()` and
// `JSON.parse`); a test reads it through one of these so the lint's no-unsafe-* rules hold in tests too
// (docs/architecture.md). Two kinds:
// - `readJson(schema, value)` checks the value against a zod schema (the service's own response schema
//   from src/openapi where there is one) and types it by the schema;
// - a typed generic (`api.get<Shape>(…)` in helpers/http.ts, `parseAs<Shape>(text)`) names a well-known
//   shape without checking it: the assertions that follow are the check.
// Either way the value itself is returned, not zod's output: unknown keys are not stripped, so an exact
// `toEqual` still sees every field the service sent.

/** `value` checked against `schema` (throws a ZodError naming the field that differs) and typed by it. */
export function readJson<S extends z.ZodType>(schema: S, value: unknown): z.infer<S> {
  schema.parse(value);
  return value as z.infer<S>;
}

/** A fetch Response's JSON body, checked against `schema`. */
export async function json<S extends z.ZodType>(res: Response, schema: S): Promise<z.infer<S>> {
  return readJson(schema, await res.json());
}

/** JSON text read as a named shape (unchecked: the caller's assertions are the check). */
export function parseAs<T>(text: string): T {
  return JSON.parse(text) as T;
}

/** A fetch Response's JSON body read as a named shape (unchecked, like parseAs). */
export async function jsonAs<T>(res: Response): Promise<T> {
  return (await res.json()) as T;
}

// The error envelopes, one per surface (CONTRACT §3; src/openapi/describe.ts).
export type DetailError = z.infer<typeof detailError>;
export type OpenAiError = z.infer<typeof openAiError>;
export type OAuthError = z.infer<typeof oauthError>;
export type JsonRpcError = z.infer<typeof jsonRpcError>;
export { detailError, jsonRpcError, oauthError, openAiError };

/** A JSON object whose fields a test reads one by one with its own expectations. */
export type JsonObject = Record<string, unknown>;

// vitest types its asymmetric matchers `any`; placed in an expected object they would be `any` flows.
// These are the same matchers, typed `unknown` (what `toEqual` takes).
export const anyOf = (ctor: unknown): unknown => expect.any(ctor);
export const anything = (): unknown => expect.anything();
export const containing = (expected: object): unknown => expect.objectContaining(expected);
export const arrayContaining = (expected: unknown[]): unknown => expect.arrayContaining(expected);
export const matching = (re: RegExp | string): unknown => expect.stringMatching(re);

/**
 * `value[k1][k2]…` of a JSON value of unknown shape: undefined where a step is not an object. For
 * checks that an answer has some shape, where the check itself is what the test asserts.
 */
export function at(value: unknown, ...path: string[]): unknown {
  let here = value;
  for (const key of path) {
    if (here === null || typeof here !== 'object') return undefined;
    here = (here as Record<string, unknown>)[key];
  }
  return here;
}

/** Whether a JSON value is an object that has `key` (the `in` operator, false for non-objects). */
export const has = (value: unknown, key: string): boolean =>
  value !== null && typeof value === 'object' && key in value;

/** What `promise` rejects with, read as `T` (a promise that fulfils fails the test here). */
export async function rejectionOf<T = Error>(promise: Promise<unknown>): Promise<T> {
  try {
    await promise;
  } catch (err) {
    return err as T;
  }
  throw new Error('expected a rejection, but the promise fulfilled');
}

/** The `detail` of a /v1 error answer (checked against the DetailError schema). */
export const detailOf = (body: unknown): DetailError['detail'] => readJson(detailError, body).detail;
/** The `error` of a model-route error answer (checked against the OpenAI error schema). */
export const openAiErrorOf = (body: unknown): OpenAiError['error'] => readJson(openAiError, body).error;
/** An /oauth/* error answer (RFC 6749 §5.2; checked against the OAuth error schema). */
export const oauthErrorOf = (body: unknown): OAuthError => readJson(oauthError, body);
