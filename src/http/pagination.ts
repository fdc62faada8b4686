import { z } from 'zod';

// Paging of every list (CONTRACT §3): `limit` default 20, max 100, `offset` ≥ 0; outside that, 400. The
// values arrive as query strings and must be written as decimal integers: "0x10", "1e1", "+5", " 1" or
// an empty value are 400, not read as numbers. Offset has no upper bound beyond a safe integer, which
// PostgreSQL's bigint OFFSET takes.

const queryInteger = z
  .string()
  .regex(/^\d{1,16}$/, 'must be a decimal integer')
  .transform(Number)
  .pipe(z.number().int().max(Number.MAX_SAFE_INTEGER));

export const pageFields = {
  limit: queryInteger.pipe(z.number().min(1).max(100)).default(20),
  offset: queryInteger.default(0),
};

export const pageQuery = z.object(pageFields);
