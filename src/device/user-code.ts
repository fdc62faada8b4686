import { randomBytes, randomInt } from 'node:crypto';

// User codes `XXXX-XXXX` from BCDFGHJKLMNPQRSTVWXZ (CONTRACT §6): no vowels (no words), no look-alikes
// (RFC 8628 §6.1). 20^8 ≈ 2^34.6 codes; guessing is bounded by the per-user failure limit and the 600 s life.

export const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';
const USER_CODE_RE = new RegExp(`^[${USER_CODE_ALPHABET}]{8}$`);

/** A fresh user code, as shown to the person: `XXXX-XXXX`. */
export function generateUserCode(): string {
  let code = '';
  for (let i = 0; i < 8; i++) code += USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)];
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}

/**
 * The canonical form of what a person typed: case-insensitive, hyphen (and spaces) optional
 * (CONTRACT §6). Null when it cannot be a user code at all.
 */
export function normaliseUserCode(input: string): string | null {
  const compact = input.toUpperCase().replace(/[\s-]/g, '');
  return USER_CODE_RE.test(compact) ? compact : null;
}

/** The device code the polling client holds: 32 random bytes, base64url. */
export const generateDeviceCode = (): string => randomBytes(32).toString('base64url');
