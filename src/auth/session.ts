import { SignJWT, jwtVerify } from 'jose';
import { and, eq, isNull } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { sessions } from '../db/schema.js';
import { newId } from '../ids.js';

// Session = HS256 JWT {sub, sid, iat, exp}, 12 h (CONTRACT §4). The sid names a row so that logout and
// a password reset revoke it server-side; the row is checked on every request.

export const SESSION_COOKIE = '__Host-svc_session';
export const SESSION_TTL_SECONDS = 12 * 60 * 60;

export interface IssuedSession {
  token: string;
  sessionId: string;
  expiresAt: Date;
}

export async function issueSession(db: Db, key: Uint8Array, userId: string): Promise<IssuedSession> {
  const sessionId = newId('ses');
  const now = Math.floor(Date.now() / 1000);
  const expiresAt = new Date((now + SESSION_TTL_SECONDS) * 1000);
  await db.insert(sessions).values({ id: sessionId, userId, expiresAt });
  const token = await new SignJWT({ sid: sessionId })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(userId)
    .setIssuedAt(now)
    .setExpirationTime(now + SESSION_TTL_SECONDS)
    .sign(key);
  return { token, sessionId, expiresAt };
}

/** The session's claims when the JWT is valid; null otherwise (the row is checked by the caller's query). */
export async function readSessionToken(
  key: Uint8Array,
  token: string,
): Promise<{ userId: string; sessionId: string } | null> {
  try {
    const { payload } = await jwtVerify(token, key, { algorithms: ['HS256'] });
    if (typeof payload.sub !== 'string' || typeof payload.sid !== 'string') return null;
    return { userId: payload.sub, sessionId: payload.sid };
  } catch {
    return null;
  }
}

export async function revokeSession(db: Db, sessionId: string): Promise<void> {
  await db
    .update(sessions)
    .set({ revokedAt: new Date() })
    .where(and(eq(sessions.id, sessionId), isNull(sessions.revokedAt)));
}

/** Every live session of a user (a password reset does this: CONTRACT §4). */
export async function revokeAllSessions(db: Db, userId: string): Promise<void> {
  await db
    .update(sessions)
    .set({ revokedAt: new Date() })
    .where(and(eq(sessions.userId, userId), isNull(sessions.revokedAt)));
}

/** The Set-Cookie attributes of the session cookie (Secure, HttpOnly, SameSite=Lax, Path=/; no Domain). */
export const sessionCookieOptions = (maxAgeSeconds: number) => ({
  httpOnly: true,
  secure: true,
  sameSite: 'lax' as const,
  path: '/',
  maxAge: maxAgeSeconds * 1000,
});
