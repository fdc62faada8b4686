import { randomBytes, randomFillSync } from 'node:crypto';

// Identifiers (CONTRACT §2): prefixed, random parts from a CSPRNG with 128 bits.

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567';

// CSPRNG bytes handed out from a pooled buffer that one randomFillSync refills, as Node does for
// randomUUID: one call to the system's generator serves 256 ids instead of one each (every chat call
// mints a request id; a call each cost 15 µs of the main thread under load, bench/cpu.ts). Each byte is
// handed out once, and consumed before the pool can be refilled.
const POOL_BYTES = 4096;
const pool = Buffer.alloc(POOL_BYTES);
let poolOffset = POOL_BYTES;

function randomPart(bytes: number): Uint8Array {
  if (bytes > POOL_BYTES / 8) return randomBytes(bytes);
  if (poolOffset + bytes > POOL_BYTES) {
    randomFillSync(pool);
    poolOffset = 0;
  }
  const part = pool.subarray(poolOffset, poolOffset + bytes);
  poolOffset += bytes;
  return part;
}

/** Lower-case base32 of `bytes` random bytes (16 bytes → 26 characters, 128 bits). */
export function randomToken(bytes = 16): string {
  const buf = randomPart(bytes);
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

export type IdPrefix =
  'usr' | 'sa' | 'prj' | 'rpt' | 'fil' | 'shr' | 'ses' | 'run' | 'req' | 'inv' | 'we' | 'evt' | 'ae';

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

/** A timestamp as a raw row hands it over (a Date from pg, text from PGlite), in unix seconds. */
export function unixOfStored(value: Date | string): number;
export function unixOfStored(value: Date | string | null | undefined): number | null;
export function unixOfStored(value: Date | string | null | undefined): number | null {
  return value === null || value === undefined ? null : unix(new Date(value));
}

export const nowUnix = (): number => Math.floor(Date.now() / 1000);

/**
 * The built-in public client's id (CONTRACT §7): the svc terminal's. Its record is oauth/builtin.ts; the
 * id sits here so the pages that name the terminal (src/portal/) need not import the OAuth face.
 */
export const BUILTIN_CLI_CLIENT_ID = 'svc-cli';
