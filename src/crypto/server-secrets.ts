import { hkdfSync, randomBytes } from 'node:crypto';
import { eq } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { serverSecrets } from '../db/schema.js';
import { decrypt, encrypt } from './hash.js';

// Server secrets the operator did not set (CONTRACT §1): generated on first start and persisted in the
// database, never logged. With a key-encryption key from the environment (KEY_ENCRYPTION_KEY; required
// in production, src/production.ts) they are stored sealed under it (AES-256-GCM), so a copy of the
// database alone holds no key that signs a session, forges an HMAC or opens the OAuth signing keys
//. The KEK itself is never stored.

/** Prefix of a value sealed under the KEK ("v1": AES-256-GCM, key derived by HKDF-SHA-256). */
const SEALED = 'kek1:';

export class ServerSecretsError extends Error {}

/** The AES key derived from KEY_ENCRYPTION_KEY (any string of 32+ characters, e.g. 32 random bytes in base64). */
export const keyEncryptionKey = (value: string): Buffer =>
  Buffer.from(hkdfSync('sha256', value, 'svc', 'server-secrets', 32));

function open(name: string, stored: string, kek: Buffer | undefined): string {
  if (!stored.startsWith(SEALED)) return stored;
  if (!kek)
    throw new ServerSecretsError(
      `server secret ${name} is sealed under a key-encryption key: set KEY_ENCRYPTION_KEY`,
    );
  try {
    return decrypt(kek, stored.slice(SEALED.length));
  } catch {
    throw new ServerSecretsError(
      `server secret ${name} does not open with this KEY_ENCRYPTION_KEY (a different key than the one that sealed it)`,
    );
  }
}

const seal = (kek: Buffer | undefined, value: string): string =>
  kek ? `${SEALED}${encrypt(kek, value)}` : value;

/**
 * Returns the named server secret, generating and persisting it on first use. Two processes starting
 * together agree: the insert is ON CONFLICT DO NOTHING and both read back. With a KEK, a secret stored
 * in plaintext before (a database that ran without one) is sealed in place on the first start with it.
 */
export async function loadOrCreateSecret(
  db: Db,
  name: string,
  kek?: Buffer,
  generate = () => randomBytes(32).toString('base64url'),
): Promise<string> {
  await db
    .insert(serverSecrets)
    .values({ name, value: seal(kek, generate()) })
    .onConflictDoNothing();
  const [row] = await db.select().from(serverSecrets).where(eq(serverSecrets.name, name));
  const value = open(name, row!.value, kek);
  if (kek && !row!.value.startsWith(SEALED))
    await db
      .update(serverSecrets)
      .set({ value: seal(kek, value) })
      .where(eq(serverSecrets.name, name));
  return value;
}

export interface Keys {
  /** HS256 key of session JWTs. */
  session: Uint8Array;
  /** HMAC key for every secret stored as a hash (API tokens, refresh tokens, codes, one-time tokens). */
  hmac: Buffer;
  /** AES-256-GCM key for secrets that must be read back (TOTP seeds, OAuth signing keys). */
  encryption: Buffer;
}

export async function loadKeys(
  db: Db,
  sessionSecret: string | undefined,
  keyEncryptionKeyValue?: string,
): Promise<Keys> {
  const kek = keyEncryptionKeyValue ? keyEncryptionKey(keyEncryptionKeyValue) : undefined;
  const session = sessionSecret ?? (await loadOrCreateSecret(db, 'session_hs256', kek));
  const hmac = await loadOrCreateSecret(db, 'secret_hmac', kek);
  const encryption = await loadOrCreateSecret(db, 'secret_encryption', kek);
  return {
    session: new TextEncoder().encode(session),
    hmac: Buffer.from(hmac, 'base64url'),
    encryption: Buffer.from(encryption, 'base64url'),
  };
}
