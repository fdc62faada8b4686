import { KeyObject, randomUUID, sign as signBytes } from 'node:crypto';
import { desc, eq, isNull } from 'drizzle-orm';
import {
  calculateJwkThumbprint,
  exportJWK,
  generateKeyPair,
  importJWK,
  type CryptoKey,
  type JWK,
} from 'jose';
import type { Db } from '../src/db/client.js';
import { oauthSigningKeys } from '../src/db/schema.js';
import { decrypt, encrypt } from '../src/crypto/hash.js';

// ES256 signing keys persisted in the database (CONTRACT §1: generated on first start, never logged;
// §7: `kid` in the JWKS). The newest unretired key signs; the JWKS lists it and the previous one, so a
// token signed just before a rotation still verifies until it expires (15 min).

export const SIGNING_ALG = 'ES256';

/** How long a process trusts its view of which key is current (rotation reaches every process within it). */
const KEYSET_TTL_MS = 60_000;

export interface SigningKey {
  kid: string;
  privateKey: CryptoKey;
}

export interface PublicKeyEntry {
  kid: string;
  jwk: JWK;
  key: CryptoKey;
}

export interface SigningKeys {
  /** The key that signs now (created on first use). */
  current(): Promise<SigningKey>;
  /** The public key for `kid` when it is current or previous; null otherwise. */
  publicKey(kid: string): Promise<CryptoKey | null>;
  /** `{keys: [...]}` for /.well-known/jwks.json: current first, then previous. */
  jwks(): Promise<{ keys: JWK[] }>;
  /** Adds a new current key; the old current becomes previous, older ones are retired. */
  rotate(): Promise<string>;
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
const keyObjects = new WeakMap<CryptoKey, KeyObject>();

/**
 * A compact JWS (RFC 7515 §7.1) over `payload`, ES256 with `key`, signed synchronously with node:crypto
 * (RFC 7518 §3.4: the signature is the raw r||s, `ieee-p1363`). jose signs through WebCrypto, whose
 * async job costs about twice the CPU of the signature itself (bench/README.md, oauth).
 */
export function signJws(key: SigningKey, typ: string, payload: Record<string, unknown>): string {
  let signer = keyObjects.get(key.privateKey);
  if (!signer) keyObjects.set(key.privateKey, (signer = KeyObject.from(key.privateKey)));
  const input = `${b64({ alg: SIGNING_ALG, typ, kid: key.kid })}.${b64(payload)}`;
  const signature = signBytes('sha256', Buffer.from(input), { key: signer, dsaEncoding: 'ieee-p1363' });
  return `${input}.${signature.toString('base64url')}`;
}

async function insertKey(db: Db, encryptionKey: Buffer): Promise<string> {
  const { privateKey, publicKey } = await generateKeyPair(SIGNING_ALG, { extractable: true });
  const publicJwk = await exportJWK(publicKey);
  // A thumbprint plus a random suffix: unique even when two processes generate at the same moment.
  const kid = `${(await calculateJwkThumbprint(publicJwk)).slice(0, 16)}-${randomUUID().slice(0, 8)}`;
  const privateJwk = await exportJWK(privateKey);
  await db.insert(oauthSigningKeys).values({
    kid,
    privateJwkEnc: encrypt(encryptionKey, JSON.stringify({ ...privateJwk, kid, alg: SIGNING_ALG })),
    publicJwk: { ...publicJwk, kid, alg: SIGNING_ALG, use: 'sig' },
  });
  return kid;
}

export function createSigningKeys(db: Db, encryptionKey: Buffer): SigningKeys {
  interface KeySet {
    at: number;
    signing: SigningKey;
    published: PublicKeyEntry[];
  }
  let loaded: KeySet | null = null;
  let loading: Promise<KeySet> | null = null;
  let lastForcedAt = 0;

  async function load(): Promise<KeySet> {
    const rows = await db
      .select()
      .from(oauthSigningKeys)
      .where(isNull(oauthSigningKeys.retiredAt))
      .orderBy(desc(oauthSigningKeys.createdAt), desc(oauthSigningKeys.kid))
      .limit(2);
    if (rows.length === 0) {
      await insertKey(db, encryptionKey);
      return load();
    }
    const [head] = rows;
    const privateJwk = JSON.parse(decrypt(encryptionKey, head!.privateJwkEnc)) as JWK;
    const signing = { kid: head!.kid, privateKey: (await importJWK(privateJwk, SIGNING_ALG)) as CryptoKey };
    const published = await Promise.all(
      rows.map(async (r) => ({
        kid: r.kid,
        jwk: r.publicJwk,
        key: (await importJWK(r.publicJwk as JWK, SIGNING_ALG)) as CryptoKey,
      })),
    );
    return { at: Date.now(), signing, published };
  }

  async function state(force = false): Promise<KeySet> {
    if (!force && loaded && Date.now() - loaded.at < KEYSET_TTL_MS) return loaded;
    loading ??= load()
      .then((fresh) => (loaded = fresh))
      .finally(() => {
        loading = null;
      });
    // Stale while it reloads: a keyset that cannot be re-read (a database outage) must not stop signing
    // with the keys already known, least of all the outcome of a call already settled.
    if (loaded && !force) {
      loading.catch(() => {});
      return loaded;
    }
    return loading;
  }

  return {
    async current() {
      return (await state()).signing;
    },
    async publicKey(kid) {
      let s = await state();
      let hit = s.published.find((k) => k.kid === kid);
      // A kid we have not seen may come from a rotation in another process: look once more.
      // At most once a second, so a flood of made-up kids cannot turn into a flood of queries.
      if (!hit && Date.now() - lastForcedAt > 1000) {
        lastForcedAt = Date.now();
        s = await state(true);
        hit = s.published.find((k) => k.kid === kid);
      }
      return hit?.key ?? null;
    },
    async jwks() {
      return { keys: (await state()).published.map((k) => k.jwk) };
    },
    async rotate() {
      const kid = await insertKey(db, encryptionKey);
      const keep = await db
        .select({ kid: oauthSigningKeys.kid })
        .from(oauthSigningKeys)
        .where(isNull(oauthSigningKeys.retiredAt))
        .orderBy(desc(oauthSigningKeys.createdAt), desc(oauthSigningKeys.kid));
      for (const old of keep.slice(2)) {
        await db
          .update(oauthSigningKeys)
          .set({ retiredAt: new Date() })
          .where(eq(oauthSigningKeys.kid, old.kid));
      }
      await state(true);
      return kid;
    },
  };
}
