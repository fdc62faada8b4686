import { createHash, randomBytes } from 'node:crypto';
import { SignJWT, jwtVerify } from 'jose';
import { webcrypto } from 'node:crypto';
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
 */
export async function readSessionToken(
  key: Uint8Array,
  token: string,
): Promise<{ userId: string; secretHash: string } | null> {
  try {
    const { payload } = await jwtVerify(token, await verifyingKey(key), { algorithms: ['HS256'] });
    if (typeof payload.sub !== 'string' || typeof payload.sid !== 'string') return null;
    return { userId: payload.sub, secretHash: sessionSecretHash(payload.sid) };
  } catch {
    return null;
  }
}

// Given the raw bytes, jose imports a WebCrypto key on every verification; every session request
// verifies one, so the key is imported once per process (decision 0130).
const verifyingKeys = new WeakMap<Uint8Array, Promise<webcrypto.CryptoKey>>();
function verifyingKey(key: Uint8Array): Promise<webcrypto.CryptoKey> {
  let imported = verifyingKeys.get(key);
  if (!imported) {
    imported = webcrypto.subtle.importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
    verifyingKeys.set(key, imported);
  }
  return imported;
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
