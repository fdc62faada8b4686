import { namedRows, type Db } from '../../db/client.js';
import { DEFAULT_HOLD_TTL_SECONDS, holdBounds, retryOnDeadlock } from '../../billing/spend.js';
import type { Role } from '../../db/schema.js';

// Admission of a chat call made with an `svc_` token (src/models/admission/chat-admission.ts decides when): the
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

/** One call's row of svc_admit_api_calls: who the token is, and what became of its hold. */
export interface AdmitRow {
  /**
   * no_token: unknown, revoked or expired; insufficient_scope: no `model` scope; refused: read, but may
   * not spend (nothing held); else the hold's outcome.
   */
  outcome:
    | 'no_token'
    | 'insufficient_scope'
    | 'refused'
    | 'held'
    | 'insufficient'
    | 'duplicate'
    | 'budget_exhausted';
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
  outcome: AdmitRow['outcome'];
}

const ADMIT = `select ord, token_id, user_id, org_key, role, email_verified, org_deleted, take, outcome
  from svc_admit_api_calls($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::float8[])`;

export async function admitMany(db: Db, inputs: AdmitInput[]): Promise<AdmitRow[]> {
  const bounds = inputs.map(holdBounds);
  const rows = await retryOnDeadlock(() =>
    namedRows<AdmissionRow>(db, 'svc_admit', ADMIT, [
      inputs.map((i) => i.tokenHash),
      inputs.map((i) => i.requestId),
      bounds.map((b) => b.lo),
      bounds.map((b) => b.hi),
      inputs.map(() => DEFAULT_HOLD_TTL_SECONDS),
    ]),
  );
  const out = new Array<AdmitRow>(inputs.length);
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
