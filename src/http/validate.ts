import type { z } from 'zod';
import { type FieldError, errorOf, COMMON_ERRORS } from './errors.js';

/** Parses an input with zod; failures are 400 VALIDATION_ERROR with one entry per field (CONTRACT §3). */
export function parse<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const errors: FieldError[] = result.error.issues.map((issue) => ({
    path: issue.path.map(String).join('.') || '(root)',
    message: issue.message,
  }));
  const first = errors[0]!;
  // On the model routes the OpenAI error object names the offending field in `param` (CONTRACT §3:
  // the OpenAI shape); the /v1 detail shape lists every field in `errors` and ignores it.
  const param = first.path === '(root)' ? undefined : first.path;
  throw errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', `${first.path}: ${first.message}`, {
    errors,
    ...(param ? { param } : {}),
  });
}
