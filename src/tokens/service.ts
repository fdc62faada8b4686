import { and, desc, eq, isNull, sql, type SQL } from 'drizzle-orm';
import { namedRows, type Db } from '../db/client.js';
import { apiTokens } from '../db/schema.js';
import { integerCursor, unknownCursor, type Page } from '../http/pagination.js';
import { hmacSecret } from '../crypto/hash.js';
import { generateApiTokenSecret, tokenPrefixOf } from '../auth/api-token-secret.js';
import { carryCredentialBudget } from '../billing/budgets.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { transaction } from '../db/transaction.js';

export type ApiTokenRow = typeof apiTokens.$inferSelect;

/**
 * Mints a credential for (org, user). Any previous active one of that pair is revoked in the same
 * transaction (CONTRACT §6), and its credential budget carries to the new one (CONTRACT §9). The partial unique index is what guarantees one active credential; a
 * per-pair advisory lock makes concurrent mints wait their turn, and a unique violation that still
 * happens is retried against the winner's row.
 */
export async function mintApiToken(
  db: Db,
  hmacKey: Buffer,
  input: {
    userId: string;
    orgKey: string;
    tokenName: string;
    expiresAt?: Date | null;
    scopes?: string[];
    origin: AuditOrigin;
  },
): Promise<{ row: ApiTokenRow; secret: string }> {
  const secret = generateApiTokenSecret();
  const attempt = () =>
    transaction(db, async (tx) => {
      // Mints of one (org, user) queue behind each other instead of failing on the index and retrying
      // (five parallel mints would exhaust any retry budget); other pairs are not held up.
      await tx.execute(
        sql`select pg_advisory_xact_lock(hashtextextended(${`api_token:${input.orgKey}:${input.userId}`}, 0))`,
      );
      const replaced = await tx
        .update(apiTokens)
        .set({ revokedAt: new Date() })
        .where(
          and(
            eq(apiTokens.orgId, input.orgKey),
            eq(apiTokens.userId, input.userId),
            isNull(apiTokens.revokedAt),
          ),
        )
        .returning({ id: apiTokens.id });
      const [row] = await tx
        .insert(apiTokens)
        .values({
          userId: input.userId,
          orgId: input.orgKey,
          tokenName: input.tokenName,
          tokenHash: hmacSecret(hmacKey, secret),
          tokenPrefix: tokenPrefixOf(secret),
          expiresAt: input.expiresAt ?? null,
          ...(input.scopes ? { scopes: input.scopes } : {}),
        })
        .returning();
      // The replaced credential's budget carries to this one (CONTRACT §9).
      await carryCredentialBudget(tx, {
        orgKey: input.orgKey,
        userId: input.userId,
        apiTokenId: row!.id,
      });
      for (const old of replaced) await recordTokenEvent(tx, 'token.revoked', input, old.id, 'replaced');
      await recordTokenEvent(tx, 'token.created', input, row!.id, undefined, {
        token_name: row!.tokenName,
        expires_at: row!.expiresAt ? Math.floor(row!.expiresAt.getTime() / 1000) : null,
        scopes: row!.scopes,
      });
      return row!;
    });
  for (let tries = 0; ; tries++) {
    try {
      return { row: await attempt(), secret };
    } catch (err) {
      if ((err as { code?: string }).code !== '23505' || tries >= 3) throw err;
    }
  }
}

/**
 * The caller's own tokens, active first, newest first (principal-scoped: CONTRACT §6 "own tokens only"),
 * in api_tokens_user_idx's order so a page is read from the index; `startingAfter` is one of those
 * tokens' ids (CONTRACT §3).
 */
export async function listOwnTokens(db: Db, userId: string, page: Page): Promise<ApiTokenRow[]> {
  const revoked = sql`(${apiTokens.revokedAt} is not null)`;
  let after: SQL | undefined;
  if (page.startingAfter !== undefined) {
    const id = integerCursor(page.startingAfter);
    const [c] = await db
      .select({ revoked: sql<boolean>`${revoked}` })
      .from(apiTokens)
      .where(and(eq(apiTokens.id, id), eq(apiTokens.userId, userId)));
    if (!c) throw unknownCursor();
    // (revoked asc, id desc) after the cursor: later in the same group, or any row of a later group.
    after = c.revoked
      ? sql`${revoked} and ${apiTokens.id} < ${id}`
      : sql`(${revoked} or ${apiTokens.id} < ${id})`;
  }
  return db
    .select()
    .from(apiTokens)
    .where(and(eq(apiTokens.userId, userId), after))
    .orderBy(revoked, desc(apiTokens.id))
    .limit(page.limit)
    .offset(page.offset);
}

/**
 * Revokes one of the caller's own tokens. A token of someone else answers exactly like an unknown one
 * (null → 404), so a member cannot probe a teammate's ids. Revoking twice returns the first revoked_at.
 */
export async function revokeOwnToken(
  db: Db,
  userId: string,
  tokenId: number,
  origin: AuditOrigin,
): Promise<ApiTokenRow | null> {
  const revoked = await transaction(db, async (tx) => {
    const [row] = await tx
      .update(apiTokens)
      .set({ revokedAt: new Date() })
      .where(and(eq(apiTokens.id, tokenId), eq(apiTokens.userId, userId), isNull(apiTokens.revokedAt)))
      .returning();
    if (row) await recordTokenEvent(tx, 'token.revoked', { ...row, origin }, row.id, 'revoked_by_holder');
    return row;
  });
  if (revoked) return revoked;
  const [existing] = await db
    .select()
    .from(apiTokens)
    .where(and(eq(apiTokens.id, tokenId), eq(apiTokens.userId, userId)));
  return existing ?? null;
}

/**
 * Revokes every active token of an org, or of one user in an org (member removal: CONTRACT §5), with one
 * `token.revoked` event each, `reason` saying why (CONTRACT §11).
 */
export async function revokeOrgTokens(
  db: Db,
  orgKey: string,
  origin: AuditOrigin,
  userId?: string,
  reason: 'member_removed' | 'client_deleted' = userId ? 'member_removed' : 'client_deleted',
): Promise<number> {
  const rows = await db
    .update(apiTokens)
    .set({ revokedAt: new Date() })
    .where(
      and(
        eq(apiTokens.orgId, orgKey),
        isNull(apiTokens.revokedAt),
        userId ? eq(apiTokens.userId, userId) : undefined,
      ),
    )
    .returning({ id: apiTokens.id, userId: apiTokens.userId });
  for (const row of rows)
    await recordTokenEvent(db, 'token.revoked', { orgKey, userId: row.userId, origin }, row.id, reason);
  return rows.length;
}

/** The starts of the UTC day, week (from Monday) and month now, as `d`, `w` and `m` (a query's `p`). */
export const SPEND_PERIODS = `select svc_budget_period_start('day', now()) as d, svc_budget_period_start('week', now()) as w,
       svc_budget_period_start('month', now()) as m`;

/**
 * A credential's spend today, this week and this month, as `today`, `week` and `month`: summed from its
 * hours in the usage rollup `u` (src/db/tables/usage.ts), which `from` names with the periods `p`
 * (SPEND_PERIODS). The periods start on a UTC hour, so the rollup's hours since each start sum to exactly
 * its records, and a month is at most 744 rows of the credential's own index range
 * (usage_rollup_credential_idx), however many calls the client made (decision 0155).
 */
export const spendOf = (from: string) =>
  `select coalesce(sum(u.credits_debited) filter (where u.hour >= p.d), 0) as today,
          coalesce(sum(u.credits_debited) filter (where u.hour >= p.w), 0) as week,
          coalesce(sum(u.credits_debited) filter (where u.hour >= p.m), 0) as month
   ${from}`;

/** What a credential debited this UTC day, week (from Monday) and month (CONTRACT §6 `spend`). */
export async function credentialSpend(
  db: Db,
  orgKey: string,
  /** An `svc_` credential's id, or an OAuth grant's (GET /v1/auth/verify with a grant, CONTRACT §7). */
  credential: number | { grantId: string },
): Promise<{ today: number; week: number; month: number }> {
  const key = typeof credential === 'number' ? `token:${credential}` : `grant:${credential.grantId}`;
  // A named statement (decision 0128): GET /v1/auth/verify reads this on every call with a grant (an
  // `svc_` token's spend comes with its status read, src/tokens/status.ts).
  const [row] = await namedRows<{ today: unknown; week: unknown; month: unknown }>(
    db,
    'tokens_spend',
    `with p as (${SPEND_PERIODS})
     ${spendOf('from p left join usage_rollup u on u.org_key = $1 and u.credential = $2 and u.hour >= least(p.w, p.m)')}`,
    [orgKey, key],
  );
  return { today: Number(row?.today ?? 0), week: Number(row?.week ?? 0), month: Number(row?.month ?? 0) };
}

/** The audit event of a credential's creation or revocation (CONTRACT §11), in the caller's transaction. */
function recordTokenEvent(
  tx: Db,
  action: 'token.created' | 'token.revoked',
  of: ({ orgKey: string } | { orgId: string }) & { userId: string; origin: AuditOrigin },
  tokenId: number,
  reason?: string,
  created?: Record<string, unknown>,
) {
  const orgKey = 'orgKey' in of ? of.orgKey : of.orgId;
  return recordAuditEvent(tx, {
    orgKey,
    action,
    target: { type: 'token', id: tokenId },
    details: { holder_id: of.userId, ...created, reason },
    origin: of.origin,
  });
}
