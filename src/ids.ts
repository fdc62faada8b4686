import { randomBytes } from 'node:crypto';

// Identifiers (CONTRACT §2): prefixed, random parts from a CSPRNG with 128 bits.

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';

/** Lower-case base32 of `bytes` random bytes (16 bytes → 26 characters, 128 bits). */
export function randomToken(bytes = 16): string {
  const buf = randomBytes(bytes);
  let out = '';
  let bits = 0;
  let value = 0;
  for (const byte of buf) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += ALPHABET[(value << (5 - bits)) & 31];
  return out;
}

export type IdPrefix = 'usr' | 'prj' | 'rpt' | 'fil' | 'shr' | 'ses' | 'run' | 'req';

export function newId(prefix: IdPrefix): string {
  return `${prefix}_${randomToken()}`;
}

// An organization has one id with two spellings, client_<x> and org_<x> (CONTRACT §2). The database
// stores <x> alone; every input accepts either spelling, and each payload emits the spelling the
// contract names for it.

export function newOrgKey(): string {
  return randomToken();
}

/** The stored key of an org id in either spelling, or null when it is neither. */
export function parseOrgId(input: string): string | null {
  const m = /^(?:client|org)_([a-z0-9]{1,64})$/.exec(input.trim());
  return m ? m[1]! : null;
}

export const clientIdOf = (key: string): string => `client_${key}`;
export const orgIdOf = (key: string): string => `org_${key}`;

/** Unix seconds (interface document: "All timestamps are integer Unix seconds"). */
export function unix(date: Date): number;
export function unix(date: Date | null | undefined): number | null;
export function unix(date: Date | null | undefined): number | null {
  return date ? Math.floor(date.getTime() / 1000) : null;
}

export const nowUnix = (): number => Math.floor(Date.now() / 1000);
