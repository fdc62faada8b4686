import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { DEFAULT_HOLD_TTL_SECONDS, holdBounds, retryOnDeadlock } from '../billing/spend.js';
import type { Role } from '../db/schema.js';

// Admission of a chat call made with an `svc_` token (src/models/chat-admission.ts decides when): the
// token's live read and the call's hold in one statement, svc_admit_api_calls
// (src/db/custom/token-admission.sql), grouped with the other calls in flight like every hold
// (ModelServices.spend.admit). The read is the account auth's (the token unrevoked, its user, its org, the
// user's membership there), so revocation and removal still take effect on the very next call.

export interface AdmitInput {
  tokenHash: string;
  requestId: string;
  minCredits: number;
  maxCredits: number;
}

export interface Admission {
  /** no_token: unknown or revoked; refused: read, but may not spend (nothing held); else the hold's outcome. */
  outcome: 'no_token' | 'refused' | 'held' | 'insufficient' | 'duplicate' | 'budget_exhausted';
  tokenId: number | null;
  userId: string | null;
  orgKey: string | null;
  role: Role | null;
  emailVerified: boolean;
  orgDeleted: boolean;
  heldCredits: number;
}

interface AdmissionRow {
  ord: number;
  token_id: number | null;
  user_id: string | null;
  org_key: string | null;
  role: Role | null;
  email_verified: boolean;
  org_deleted: boolean;
  take: unknown;
  outcome: Admission['outcome'];
}

export async function admitMany(db: Db, inputs: AdmitInput[]): Promise<Admission[]> {
  const bounds = inputs.map(holdBounds);
  const rows = await retryOnDeadlock(() =>
    queryRows<AdmissionRow>(
      db,
      sql`select ord, token_id, user_id, org_key, role, email_verified, org_deleted, take, outcome from svc_admit_api_calls(
          ${sql.param(inputs.map((i) => i.tokenHash))}::text[],
          ${sql.param(inputs.map((i) => i.requestId))}::text[],
          ${sql.param(bounds.map((b) => b.lo))}::bigint[],
          ${sql.param(bounds.map((b) => b.hi))}::bigint[],
          ${sql.param(inputs.map(() => DEFAULT_HOLD_TTL_SECONDS))}::float8[])`,
    ),
  );
  const out = new Array<Admission>(inputs.length);
  for (const r of rows) {
    out[Number(r.ord) - 1] = {
      outcome: r.outcome,
      tokenId: r.token_id,
      userId: r.user_id,
      orgKey: r.org_key,
      role: r.role,
      emailVerified: r.email_verified,
      orgDeleted: r.org_deleted,
      heldCredits: Number(r.take ?? 0),
    };
  }
  // Every input has its row; one without (never expected) is refused rather than guessed.
  return Array.from(
    out,
    (a) =>
      a ?? {
        outcome: 'no_token',
        tokenId: null,
        userId: null,
        orgKey: null,
        role: null,
        emailVerified: false,
        orgDeleted: false,
        heldCredits: 0,
      },
  );
}
