import { randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { serverSecrets } from '../db/schema.js';

/**
 * Returns the named server secret, generating and persisting it on first use (CONTRACT §1: secrets the
 * operator did not set are generated on first start and persisted in the database, never logged).
 * Two processes starting together agree: the insert is ON CONFLICT DO NOTHING and both read back.
 */
export async function loadOrCreateSecret(
  db: Db,
  name: string,
  generate = () => randomBytes(32).toString('base64url'),
) {
  await db.insert(serverSecrets).values({ name, value: generate() }).onConflictDoNothing();
  const [row] = await db.select().from(serverSecrets).where(eq(serverSecrets.name, name));
  return row!.value;
}

export interface Keys {
  /** HS256 key of session JWTs. */
  session: Uint8Array;
  /** HMAC key for every secret stored as a hash (API tokens, refresh tokens, codes, one-time tokens). */
  hmac: Buffer;
  /** AES-256-GCM key for secrets that must be read back (TOTP seeds). */
  encryption: Buffer;
}

export async function loadKeys(db: Db, sessionSecret: string | undefined): Promise<Keys> {
  const session = sessionSecret ?? (await loadOrCreateSecret(db, 'session_hs256'));
  const hmac = await loadOrCreateSecret(db, 'secret_hmac');
  const encryption = await loadOrCreateSecret(db, 'secret_encryption');
  return {
    session: new TextEncoder().encode(session),
    hmac: Buffer.from(hmac, 'base64url'),
    encryption: Buffer.from(encryption, 'base64url'),
  };
}
