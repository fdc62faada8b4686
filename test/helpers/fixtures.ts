import { randomToken, clientIdOf, orgIdOf } from '../../src/ids.js';
import { registerAccount, markEmailVerified } from '../../src/accounts/service.js';
import { issueSession } from '../../src/auth/session.js';
import { mintApiToken } from '../../src/tokens/service.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import { memberships } from '../../src/db/schema.js';
import type { Role } from '../../src/db/schema.js';
import type { TestServer } from './server.js';

// Fixtures go through the real services (never around them) so a test's user is a real user.

export const STRONG_PASSWORD = 'correct-Horse-9';

export interface TestUser {
  userId: string;
  email: string;
  password: string;
  /** Stored key of the default organization. */
  orgKey: string;
  clientId: string;
  orgId: string;
  /** A session JWT, usable as a bearer. */
  session: string;
}

export async function createUser(
  server: TestServer,
  opts: { email?: string; name?: string; verified?: boolean } = {},
): Promise<TestUser> {
  const email = opts.email ?? `user-${randomToken(6)}@example.test`;
  const { user, org } = await registerAccount(
    server.deps.db,
    { email, name: opts.name ?? 'Test User', password: STRONG_PASSWORD },
    server.deps.hooks.accountCreated,
  );
  if (opts.verified !== false) await markEmailVerified(server.deps.db, user.id);
  const { token } = await issueSession(server.deps.db, server.deps.keys.session, user.id);
  return {
    userId: user.id,
    email: user.email,
    password: STRONG_PASSWORD,
    orgKey: org.id,
    clientId: clientIdOf(org.id),
    orgId: orgIdOf(org.id),
    session: token,
  };
}

/** Adds a user to an organization directly (member management routes have their own tests). */
export async function addMember(server: TestServer, orgKey: string, userId: string, role: Role = 'member') {
  await server.deps.db.insert(memberships).values({ orgId: orgKey, userId, role });
}

/**
 * Mints an `svc_` token as POST /v1/tokens does. A user has one live token per organization: minting
 * another for the same user and org revokes the first (src/tokens/service.ts). A second live token of an
 * org needs a second member.
 */
export async function createApiToken(
  server: TestServer,
  user: { userId: string },
  orgKey: string,
  tokenName = 'test',
) {
  const { row, secret } = await mintApiToken(server.deps.db, server.deps.keys.hmac, {
    userId: user.userId,
    orgKey,
    tokenName,
    origin: SYSTEM_ORIGIN,
  });
  return { id: row.id, secret };
}
