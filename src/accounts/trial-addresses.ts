import { eq } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { usedTrialAddresses } from '../db/schema.js';
import { hmacSecret } from '../crypto/hash.js';
import { normaliseEmail } from './users.js';

// One trial per address (CONTRACT §8; docs/accounts.md § One trial per address). When an account is
// deleted, its mailbox is remembered as a keyed hash (HMAC-SHA-256 with the server's HMAC key, never the
// address), and an account registered later with the same mailbox gets no trial. "The same mailbox" is
// the address after the provider's own aliases are removed: case everywhere; dots and plus-tags at Gmail,
// where `J.Doe+x@googlemail.com` reaches `jdoe@gmail.com`; plus-tags at the providers that document them
// as aliases of the one mailbox.

/** Gmail ignores dots in the local part and anything after a `+` (googlemail.com is the same service). */
const GMAIL = new Set(['gmail.com', 'googlemail.com']);

/** Providers whose documentation says `name+anything@` is delivered to `name@`. */
const PLUS_TAGS = new Set([
  // Microsoft (Outlook.com)
  'outlook.com',
  'hotmail.com',
  'live.com',
  'msn.com',
  // Apple (iCloud Mail)
  'icloud.com',
  'me.com',
  'mac.com',
  // Fastmail
  'fastmail.com',
  'fastmail.fm',
  // Proton Mail
  'proton.me',
  'protonmail.com',
  'protonmail.ch',
  'pm.me',
  // Zoho Mail, HEY, Yandex
  'zoho.com',
  'hey.com',
  'yandex.com',
  'yandex.ru',
]);

/** The address as the trial rule compares it: one spelling per mailbox of the well-known providers. */
export function canonicalMailbox(email: string): string {
  const address = normaliseEmail(email);
  const at = address.lastIndexOf('@');
  if (at <= 0) return address;
  let local = address.slice(0, at);
  let domain = address.slice(at + 1);
  if (GMAIL.has(domain)) {
    domain = 'gmail.com';
    local = local.split('+')[0]!.replaceAll('.', '');
  } else if (PLUS_TAGS.has(domain)) {
    local = local.split('+')[0]!;
  }
  return `${local || address.slice(0, at)}@${domain}`;
}

/** The stored form: a keyed hash, so the table holds no address and cannot be matched without the key. */
export const trialAddressHash = (hmacKey: Buffer, email: string): string =>
  hmacSecret(hmacKey, `trial-address:${canonicalMailbox(email)}`);

/** Remembers that this mailbox had its trial (in the deletion's transaction). */
export async function recordUsedTrial(db: Db, hmacKey: Buffer, email: string): Promise<void> {
  await db
    .insert(usedTrialAddresses)
    .values({ addressHash: trialAddressHash(hmacKey, email) })
    .onConflictDoNothing();
}

/** Whether a deleted account of this mailbox already had a trial. */
export async function trialUsedBefore(db: Db, hmacKey: Buffer, email: string): Promise<boolean> {
  const [row] = await db
    .select({ hash: usedTrialAddresses.addressHash })
    .from(usedTrialAddresses)
    .where(eq(usedTrialAddresses.addressHash, trialAddressHash(hmacKey, email)));
  return row !== undefined;
}
