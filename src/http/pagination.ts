import { z } from 'zod';
import { AppError, errorOf, COMMON_ERRORS } from './errors.js';

// Paging of every list (CONTRACT §3): `limit` default 20, max 100, `offset` ≥ 0; outside that, 400. The
// values arrive as query strings and must be written as decimal integers: "0x10", "1e1", "+5", " 1" or
// an empty value are 400, not read as numbers. Offset has no upper bound beyond a safe integer, which
// PostgreSQL's bigint OFFSET takes.
//
// `starting_after` (CONTRACT §3, Stripe's cursor) is the id of the last item of the previous page: the
// page starts right after that item in the list's own order, read from an index that has that order, so
// a page costs the same at any depth. An id that is not an item of this list is 400
// VALIDATION_ERROR on `starting_after` (as Stripe refuses an unknown cursor). Given with `offset`, the
// offset counts from the cursor (`offset=0`, what a generic client sends, changes nothing).

const queryInteger = z
  .string()
  .regex(/^\d{1,16}$/, 'must be a decimal integer')
  .transform(Number)
  .pipe(z.number().int().max(Number.MAX_SAFE_INTEGER));

/** Ids are short (`prj_…`, `usr_…`, `req_…`, integers): anything longer is no id of ours. */
const cursorId = z.string().min(1).max(200).describe('the id of the last item of the previous page');

export const pageFields = {
  limit: queryInteger.pipe(z.number().min(1).max(100)).default(20),
  offset: queryInteger.default(0),
  starting_after: cursorId.optional(),
};

export const pageQuery = z.object(pageFields);

/** One page of a list: how many, how many to skip, and the cursor when one was sent. */
export interface Page {
  limit: number;
  offset: number;
  startingAfter?: string | undefined;
}

/** The parsed query fields as a Page. */
export const pageOf = (q: { limit: number; offset: number; starting_after?: string | undefined }): Page => ({
  limit: q.limit,
  offset: q.offset,
  startingAfter: q.starting_after,
});

/** 400 for a cursor that names no item of the list being paged. */
export const unknownCursor = (): AppError =>
  errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', 'starting_after: no such item in this list', {
    errors: [{ path: 'starting_after', message: 'no such item in this list' }],
    param: 'starting_after',
  });

/** The cursor of a list whose ids are integers (transactions, tokens): a non-integer names no item. */
export function integerCursor(cursor: string): number {
  if (!/^\d{1,16}$/.test(cursor)) throw unknownCursor();
  return Number(cursor);
}
