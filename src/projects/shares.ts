import { randomBytes } from 'node:crypto';
import { and, eq, isNull } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { projectShares, type ShareRole } from '../db/schema.js';
import { hmacSecret } from '../crypto/hash.js';
import { COMMON_ERRORS, errorOf, notFound } from '../http/errors.js';
import { PROJECT_ERRORS } from './errors.js';
import { ACCOUNT_ERRORS } from '../accounts/errors.js';
import { newId } from '../ids.js';
import { requireProject, type Actor } from './access.js';
import { findShare, findUserByEmail, listLiveShares, projectByLinkHash, type ProjectRow } from './queries.js';
import { toShare, type ShareOut } from './schema.js';

// Sharing a project (CONTRACT §10): with a registered user as viewer or editor, or as a read-only public
// link `{V2_URL}/s/<token>` whose token is stored as an HMAC only and can be revoked. Owners and members
// of the project's client manage shares; a share never lets its holder share further.

/** Shares the project with a registered, verified account; sharing again changes the role. */
export async function shareWithUser(
  db: Db,
  actor: Actor,
  projectId: string,
  input: { email: string; role: ShareRole },
): Promise<ShareOut> {
  await requireProject(db, actor, projectId, 'manage');
  const user = await findUserByEmail(db, input.email);
  if (!user || !user.verifiedAt)
    throw errorOf(ACCOUNT_ERRORS, 'USER_NOT_FOUND', 'no registered account has this e-mail');
  const live = and(
    eq(projectShares.projectId, projectId),
    eq(projectShares.userId, user.id),
    eq(projectShares.kind, 'user'),
    isNull(projectShares.revokedAt),
  );
  for (let attempt = 0; attempt < 3; attempt++) {
    const [updated] = await db.update(projectShares).set({ role: input.role }).where(live).returning();
    if (updated) return toShare(updated, user.email);
    try {
      const [row] = await db
        .insert(projectShares)
        .values({
          id: newId('shr'),
          projectId,
          kind: 'user',
          userId: user.id,
          role: input.role,
          createdBy: actor.userId,
        })
        .returning();
      return toShare(row!, user.email);
    } catch (err) {
      // A racing share of the same user won the partial unique index; update theirs instead.
      if ((err as { code?: string }).code !== '23505') throw err;
    }
  }
  throw errorOf(PROJECT_ERRORS, 'CONFLICT');
}

/** A new read-only public link. The URL (with the token) is returned once, in this answer. */
export async function createShareLink(
  db: Db,
  hmacKey: Buffer,
  v2Url: string,
  actor: Actor,
  projectId: string,
): Promise<ShareOut & { url: string }> {
  await requireProject(db, actor, projectId, 'manage');
  const token = randomBytes(32).toString('base64url');
  const [row] = await db
    .insert(projectShares)
    .values({
      id: newId('shr'),
      projectId,
      kind: 'link',
      role: 'viewer',
      tokenHash: hmacSecret(hmacKey, token),
      createdBy: actor.userId,
    })
    .returning();
  return { ...toShare(row!, null), url: `${v2Url.replace(/\/$/, '')}/s/${token}` };
}

/** Live shares of a project; members of its client (any role) may list them. */
export async function listShares(db: Db, actor: Actor, projectId: string): Promise<ShareOut[]> {
  const access = await requireProject(db, actor, projectId, 'read');
  if (access.viaShare)
    throw errorOf(COMMON_ERRORS, 'NO_ACCESS', 'only members of the client can list shares');
  return (await listLiveShares(db, projectId)).map((r) => toShare(r.share, r.email));
}

export async function revokeShare(db: Db, actor: Actor, shareId: string): Promise<ShareOut> {
  const found = await findShare(db, shareId);
  if (!found) throw notFound('share not found');
  await requireProject(db, actor, found.share.projectId, 'manage');
  const [row] = await db
    .update(projectShares)
    .set({ revokedAt: new Date() })
    .where(and(eq(projectShares.id, shareId), isNull(projectShares.revokedAt)))
    .returning();
  // Revoking twice answers with the share as it is (idempotent).
  return toShare(row ?? found.share, found.email);
}

/** The project behind a public link token, or undefined when unknown or revoked. */
export async function projectForLink(
  db: Db,
  hmacKey: Buffer,
  token: string,
): Promise<ProjectRow | undefined> {
  if (!/^[A-Za-z0-9_-]{20,100}$/.test(token)) return undefined;
  return projectByLinkHash(db, hmacSecret(hmacKey, token));
}
