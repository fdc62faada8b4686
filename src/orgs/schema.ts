import { z } from 'zod';
import { parseOrgId } from '../ids.js';

// Inputs shared by the org, token and device routes (STYLE: zod on every input).

/**
 * An organization id in either spelling, client_<x> or org_<x> (CONTRACT §2), parsed to its stored key.
 * Anything else (an e-mail, a bare key, garbage) is a validation error: membership is never inferred
 * from an e-mail (interface document: Team membership).
 */
export const orgKeyField = z
  .string()
  .max(100)
  .transform((value, ctx) => {
    const key = parseOrgId(value);
    if (!key) {
      ctx.issues.push({ code: 'custom', message: 'must be a client_… or org_… id', input: value });
      return z.NEVER;
    }
    return key;
  });
