import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { SignJWT } from 'jose';
import { and, eq, isNull } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { sessions } from '../db/schema.js';
import { newId } from '../ids.js';

// Session = HS256 JWT {sub, sid, iat, exp}, 12 h (CONTRACT §4). The sid is a secret (32 random bytes)
// stored only as its SHA-256 (a database copy must not be enough to forge a live
// session); the row it names is checked on every request, so logout and a reset take effect at once.
// Each row also has a public handle, `ses_…` (sessions.id), by which the portal lists and revokes it.
// SHA-256 without a key suffices here: the sid has 256 bits of entropy, so its hash cannot be inverted.

export const SESSION_COOKIE = '__Host-svc_session';
export const SESSION_TTL_SECONDS = 12 * 60 * 60;

export interface IssuedSession {
  token: string;
  /** The public handle (ses_…), not the secret sid. */
  sessionId: string;
  expiresAt: Date;
}

export const sessionSecretHash = (sid: string): string =>
  createHash('sha256').update(sid).digest('base64url');

export async function issueSession(db: Db, key: Uint8Array, userId: string): Promise<IssuedSession> {
  const sessionId = newId('ses');
  const sid = randomBytes(32).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const expiresAt = new Date((now + SESSION_TTL_SECONDS) * 1000);
  await db.insert(sessions).values({ id: sessionId, secretHash: sessionSecretHash(sid), userId, expiresAt });
  const token = await new SignJWT({ sid })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(userId)
    .setIssuedAt(now)
    .setExpirationTime(now + SESSION_TTL_SECONDS)
    .sign(key);
  return { token, sessionId, expiresAt };
}

/**
 * The session's claims when the JWT is valid, with the sid already hashed (the row is looked up by
 * `secretHash` in the caller's query); null otherwise.
 *
 * Checked here, synchronously, with node:crypto's HMAC (decision 0126): `jose` verifies through
 * WebCrypto, a job on the thread pool and a promise per request, several times the HMAC itself. The
 * checks are those `jwtVerify` made for a token of ours: three base64url parts, a JSON header of
 * `alg: HS256` with no critical extensions, the signature (compared in constant time, in its one
 * canonical spelling), a JSON object as payload, `exp` a number still in the future, `nbf` and `iat`
 * numbers when present, `nbf` passed; then `sub` and `sid` strings.
 */
export function readSessionToken(
  key: Uint8Array,
  token: string,
): { userId: string; secretHash: string } | null {
  const parts = token.split('.');
  if (parts.length !== 3) return null;
  const [header, payload, signature] = parts as [string, string, string];
  const expected = Buffer.from(createHmac('sha256', key).update(`${header}.${payload}`).digest('base64url'));
  const given = Buffer.from(signature);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
  const head = jsonObject(header);
  if (!head || head.alg !== 'HS256' || 'crit' in head || 'b64' in head) return null;
  const claims = jsonObject(payload);
  if (!claims) return null;
  const now = Math.floor(Date.now() / 1000);
  if (typeof claims.exp !== 'number' || claims.exp <= now) return null;
  if (claims.nbf !== undefined && (typeof claims.nbf !== 'number' || claims.nbf > now)) return null;
  if (claims.iat !== undefined && typeof claims.iat !== 'number') return null;
  if (typeof claims.sub !== 'string' || typeof claims.sid !== 'string') return null;
  return { userId: claims.sub, secretHash: sessionSecretHash(claims.sid) };
}

/** A base64url JSON object, or null (not base64url, not JSON, not an object). */
function jsonObject(part: string): Record<string, unknown> | null {
  if (!/^[A-Za-z0-9_-]*$/.test(part)) return null;
  try {
    const value: unknown = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return value && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}

/** Revokes one session by its public handle (ses_…). */
export async function revokeSession(db: Db, sessionId: string): Promise<void> {
  await db
    .update(sessions)
    .set({ revokedAt: new Date() })
    .where(and(eq(sessions.id, sessionId), isNull(sessions.revokedAt)));
}

/** The Set-Cookie attributes of the session cookie (Secure, HttpOnly, SameSite=Lax, Path=/; no Domain). */
export const sessionCookieOptions = (maxAgeSeconds: number) => ({
  httpOnly: true,
  secure: true,
  sameSite: 'lax' as const,
  path: '/',
  maxAge: maxAgeSeconds * 1000,
});
