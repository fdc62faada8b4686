import { and, eq } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { isPersonId, memberships, orgs, users } from '../db/schema.js';
import { AppError, errorOf } from '../http/errors.js';
import { newId, newOrgKey } from '../ids.js';
import { hashPassword, passwordProblem } from './password.js';
import { transaction } from '../db/transaction.js';
import { ACCOUNT_ERRORS } from './errors.js';

// Account records: register, find, mark verified. The parts of the account service (login, two-factor,
// password reset, e-mail verification) build on these; src/accounts/service.ts gathers them all for the
// routes and pages, and nothing here imports that façade back (docs/architecture.md).

export const normaliseEmail = (email: string): string => email.trim().toLowerCase();

export interface RegisterInput {
  email: string;
  name: string;
  password: string;
}

export type UserRow = typeof users.$inferSelect;
export type OrgRow = typeof orgs.$inferSelect;

/**
 * Hooks run inside the registration transaction (billing grants the trial here: CONTRACT §8).
 * `trialEligible` is false when a deleted account of the same mailbox already had the trial.
 */
export type OnAccountCreated = (
  tx: Db,
  account: { user: UserRow; org: OrgRow; trialEligible: boolean },
) => Promise<void>;

/**
 * The default organization's name says whose and that it is personal, so a person
 * invited into someone else's organization never sees two that look alike. It can be renamed.
 */
export const personalOrgName = (name: string, email: string): string =>
  `${name.trim() || email}'s personal organization`;

/**
 * Creates an e-mail/password account and its default organization, with the owner membership, in one
 * transaction (interface document: Register). 400 WEAK_PASSWORD, 409 EMAIL_TAKEN (CONTRACT §4).
 */
export async function registerAccount(
  db: Db,
  input: RegisterInput,
  onCreated: OnAccountCreated[] = [],
  options: {
    /** Answers, inside the transaction, whether this mailbox had a trial before (./trial-addresses.ts). */
    trialUsedBefore?: (tx: Db, email: string) => Promise<boolean>;
  } = {},
): Promise<{ user: UserRow; org: OrgRow }> {
  const problem = passwordProblem(input.password);
  if (problem) throw errorOf(ACCOUNT_ERRORS, 'WEAK_PASSWORD', problem);
  const email = normaliseEmail(input.email);
  const passwordHash = await hashPassword(input.password);
  try {
    return await transaction(db, async (tx) => {
      const [user] = await tx
        .insert(users)
        .values({ id: newId('usr'), email, name: input.name.trim(), passwordHash })
        .onConflictDoNothing({ target: users.email })
        .returning();
      if (!user) throw errorOf(ACCOUNT_ERRORS, 'EMAIL_TAKEN', 'an account with this e-mail already exists');
      const [org] = await tx
        .insert(orgs)
        .values({
          id: newOrgKey(),
          name: personalOrgName(input.name, email),
          ownerId: user.id,
          isDefault: true,
        })
        .returning();
      await tx.insert(memberships).values({ orgId: org!.id, userId: user.id, role: 'owner' });
      const trialEligible = !(await options.trialUsedBefore?.(tx, email));
      for (const hook of onCreated) await hook(tx, { user, org: org!, trialEligible });
      return { user, org: org! };
    });
  } catch (err) {
    if (err instanceof AppError) throw err;
    // A racing registration of the same e-mail can still surface as a unique violation.
    if ((err as { code?: string }).code === '23505') {
      throw errorOf(ACCOUNT_ERRORS, 'EMAIL_TAKEN', 'an account with this e-mail already exists');
    }
    throw err;
  }
}

export async function findUserByEmail(db: Db, email: string): Promise<UserRow | undefined> {
  const [user] = await db
    .select()
    .from(users)
    .where(and(eq(users.email, normaliseEmail(email)), isPersonId(users.id)));
  return user;
}

export async function markEmailVerified(db: Db, userId: string): Promise<void> {
  await db.update(users).set({ emailVerifiedAt: new Date() }).where(eq(users.id, userId));
}
