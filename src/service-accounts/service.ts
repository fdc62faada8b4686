import { and, asc, desc, eq, inArray, isNull } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { apiTokens, memberships, serviceAccounts, users, type Role } from '../db/schema.js';
import { newId } from '../ids.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { mintApiToken, type ApiTokenRow } from '../tokens/service.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { transaction } from '../db/transaction.js';

// Service accounts (CONTRACT §11): an organization's non-person principals. Each is a users row of its
// own id (`sa_…`: no password, an address under `.invalid`, so it never signs in) with a membership of its
// role, so the credential checks, budgets, limits and usage of a member's credential apply unchanged; the
// one-active-credential index on (organization, holder) is the contract's (organization, principal) rule.

export type ServiceAccountRow = typeof serviceAccounts.$inferSelect & { role: Role };

/** The hash stored for a service account's "password": no KDF output, so nothing ever verifies. */
const NO_PASSWORD = '!service-account';

const noSuchServiceAccount = () => errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such service account');

export async function createServiceAccount(
  db: Db,
  input: {
    orgKey: string;
    name: string;
    role: Exclude<Role, 'owner'>;
    createdBy: string;
    origin: AuditOrigin;
  },
): Promise<ServiceAccountRow> {
  const id = newId('sa');
  return transaction(db, async (tx) => {
    await tx.insert(users).values({
      id,
      email: `${id}@service-account.invalid`,
      name: input.name,
      passwordHash: NO_PASSWORD,
      // Verified: a credential's holder must be (Authentication 5); the address receives nothing.
      emailVerifiedAt: new Date(),
    });
    await tx.insert(memberships).values({ orgId: input.orgKey, userId: id, role: input.role });
    const [row] = await tx
      .insert(serviceAccounts)
      .values({ id, orgId: input.orgKey, name: input.name, createdBy: input.createdBy })
      .returning();
    await recordAuditEvent(tx, {
      orgKey: input.orgKey,
      action: 'service_account.created',
      target: { type: 'service_account', id },
      details: { name: input.name, role: input.role },
      origin: input.origin,
    });
    return { ...row!, role: input.role };
  });
}

/** The organization's live service accounts, oldest first, each with its active credential (or null). */
export async function listServiceAccounts(
  db: Db,
  orgKey: string,
): Promise<{ account: ServiceAccountRow; credential: ApiTokenRow | null }[]> {
  const accounts = await db
    .select({ sa: serviceAccounts, role: memberships.role })
    .from(serviceAccounts)
    .innerJoin(memberships, and(eq(memberships.userId, serviceAccounts.id), eq(memberships.orgId, orgKey)))
    .where(and(eq(serviceAccounts.orgId, orgKey), isNull(serviceAccounts.deletedAt)))
    .orderBy(asc(serviceAccounts.createdAt), asc(serviceAccounts.id));
  const ids = accounts.map((a) => a.sa.id);
  const credentials = ids.length
    ? await db
        .select()
        .from(apiTokens)
        .where(and(eq(apiTokens.orgId, orgKey), inArray(apiTokens.userId, ids), isNull(apiTokens.revokedAt)))
        .orderBy(desc(apiTokens.id))
    : [];
  return accounts.map((a) => ({
    account: { ...a.sa, role: a.role },
    credential: credentials.find((c) => c.userId === a.sa.id) ?? null,
  }));
}

async function liveServiceAccount(db: Db, orgKey: string, id: string): Promise<ServiceAccountRow> {
  const [row] = await db
    .select({ sa: serviceAccounts, role: memberships.role })
    .from(serviceAccounts)
    .innerJoin(memberships, and(eq(memberships.userId, serviceAccounts.id), eq(memberships.orgId, orgKey)))
    .where(
      and(eq(serviceAccounts.id, id), eq(serviceAccounts.orgId, orgKey), isNull(serviceAccounts.deletedAt)),
    );
  if (!row) throw noSuchServiceAccount();
  return { ...row.sa, role: row.role };
}

/**
 * Mints the service account's credential: the one active credential of (organization, principal), the
 * previous one revoked in the same transaction (mintApiToken; CONTRACT §11).
 */
export async function mintServiceAccountToken(
  db: Db,
  hmacKey: Buffer,
  input: {
    orgKey: string;
    id: string;
    tokenName: string;
    expiresAt: Date | null;
    scopes: string[];
    origin: AuditOrigin;
  },
) {
  await liveServiceAccount(db, input.orgKey, input.id);
  return mintApiToken(db, hmacKey, {
    userId: input.id,
    orgKey: input.orgKey,
    tokenName: input.tokenName,
    expiresAt: input.expiresAt,
    scopes: input.scopes,
    origin: input.origin,
  });
}

/**
 * Deletes a service account: in one transaction its credential is revoked, its membership ends (so no
 * request of it passes the membership read again) and the row is marked deleted. Its users row stays,
 * because the ledger and the usage records name it.
 */
export async function deleteServiceAccount(
  db: Db,
  orgKey: string,
  id: string,
  origin: AuditOrigin,
): Promise<void> {
  await transaction(db, async (tx) => {
    const [deleted] = await tx
      .update(serviceAccounts)
      .set({ deletedAt: new Date() })
      .where(
        and(eq(serviceAccounts.id, id), eq(serviceAccounts.orgId, orgKey), isNull(serviceAccounts.deletedAt)),
      )
      .returning();
    if (!deleted) throw noSuchServiceAccount();
    const revoked = await tx
      .update(apiTokens)
      .set({ revokedAt: new Date() })
      .where(and(eq(apiTokens.orgId, orgKey), eq(apiTokens.userId, id), isNull(apiTokens.revokedAt)))
      .returning({ id: apiTokens.id });
    for (const token of revoked)
      await recordAuditEvent(tx, {
        orgKey,
        action: 'token.revoked',
        target: { type: 'token', id: token.id },
        details: { holder_id: id, reason: 'service_account_deleted' },
        origin,
      });
    await recordAuditEvent(tx, {
      orgKey,
      action: 'service_account.deleted',
      target: { type: 'service_account', id },
      details: { name: deleted.name },
      origin,
    });
    await tx.delete(memberships).where(and(eq(memberships.orgId, orgKey), eq(memberships.userId, id)));
  });
}
