import { and, eq, isNull } from 'drizzle-orm';
import { z } from 'zod';
import type { Db } from '../db/client.js';
import { apiTokens, orgs } from '../db/schema.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { clientIdOf } from '../ids.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { transaction } from '../db/transaction.js';

// The stored RPM and TPM limits of an organization and of one of its credentials (CONTRACT §11).

const limitValue = z.number().int().positive().max(2_147_483_647).nullable().default(null);
export const limitsBody = z.object({ rpm: limitValue, tpm: limitValue });
export type LimitsBody = z.infer<typeof limitsBody>;

const noSuchToken = () => errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such active token of this client');

export async function setOrgLimits(db: Db, orgKey: string, limits: LimitsBody, origin: AuditOrigin) {
  await transaction(db, async (tx) => {
    await tx.update(orgs).set({ rpmLimit: limits.rpm, tpmLimit: limits.tpm }).where(eq(orgs.id, orgKey));
    await recordAuditEvent(
      tx,
      limitsEvent(orgKey, { type: 'client', id: clientIdOf(orgKey) }, limits, origin),
    );
  });
  return getOrgLimits(db, orgKey);
}

/** CONTRACT §11 `limits.set`: an organization's or a credential's limits, null for none. */
const limitsEvent = (
  orgKey: string,
  target: { type: string; id: string | number },
  limits: LimitsBody,
  origin: AuditOrigin,
) => ({
  orgKey,
  action: 'limits.set' as const,
  target,
  details: { rpm: limits.rpm, tpm: limits.tpm },
  origin,
});

export async function getOrgLimits(db: Db, orgKey: string) {
  const [row] = await db
    .select({ rpm: orgs.rpmLimit, tpm: orgs.tpmLimit })
    .from(orgs)
    .where(eq(orgs.id, orgKey));
  return { client_id: clientIdOf(orgKey), rpm: row?.rpm ?? null, tpm: row?.tpm ?? null };
}

const activeToken = (orgKey: string, tokenId: number) =>
  and(eq(apiTokens.id, tokenId), eq(apiTokens.orgId, orgKey), isNull(apiTokens.revokedAt));

export async function setTokenLimits(
  db: Db,
  orgKey: string,
  tokenId: number,
  limits: LimitsBody,
  origin: AuditOrigin,
) {
  const row = await transaction(db, async (tx) => {
    const [updated] = await tx
      .update(apiTokens)
      .set({ rpmLimit: limits.rpm, tpmLimit: limits.tpm })
      .where(activeToken(orgKey, tokenId))
      .returning({ rpm: apiTokens.rpmLimit, tpm: apiTokens.tpmLimit });
    if (updated)
      await recordAuditEvent(tx, limitsEvent(orgKey, { type: 'token', id: tokenId }, limits, origin));
    return updated;
  });
  if (!row) throw noSuchToken();
  return { client_id: clientIdOf(orgKey), token_id: tokenId, rpm: row.rpm, tpm: row.tpm };
}

export async function getTokenLimits(db: Db, orgKey: string, tokenId: number) {
  const [row] = await db
    .select({ rpm: apiTokens.rpmLimit, tpm: apiTokens.tpmLimit })
    .from(apiTokens)
    .where(activeToken(orgKey, tokenId));
  if (!row) throw noSuchToken();
  return { client_id: clientIdOf(orgKey), token_id: tokenId, rpm: row.rpm, tpm: row.tpm };
}
