import { hash, verify } from '@node-rs/argon2';
import pLimit from 'p-limit';

// argon2id at OWASP's recommended parameters (m=19 MiB, t=2, p=1) (CONTRACT §4: a memory-hard KDF).
const PARAMS = { algorithm: 2 /* Argon2id */, memoryCost: 19_456, timeCost: 2, parallelism: 1 } as const;

/**
 * Hashes running at once. Each one occupies a thread of libuv's pool (4 threads) for tens of
 * milliseconds, and the pool serves its jobs in arrival order: unbounded, a burst of sign-ins would queue
 * the process's short jobs behind it (a host name's lookup as a connection to the model provider opens).
 * Two at once leave the pool's other threads to them (decision 0159).
 */
export const PASSWORD_HASHES_AT_ONCE = 2;
const passwordHashing = pLimit(PASSWORD_HASHES_AT_ONCE);

export const hashPassword = (password: string): Promise<string> =>
  passwordHashing(() => hash(password, PARAMS));

export async function verifyPassword(passwordHash: string, password: string): Promise<boolean> {
  try {
    return await passwordHashing(() => verify(passwordHash, password));
  } catch {
    return false;
  }
}

/**
 * A hash of a random password, verified against when the e-mail is unknown so that an unknown account
 * and a wrong password take similar time (CONTRACT §4: same answer and similar time for both).
 */
let decoy: Promise<string> | undefined;
export const decoyHash = (): Promise<string> => (decoy ??= hashPassword(`decoy-${Math.random()}`));

/** At least eight characters including a letter, a number and a special character (interface document). */
export function passwordProblem(password: string): string | null {
  if (password.length < 8) return 'password must have at least 8 characters';
  if (!/\p{L}/u.test(password)) return 'password must contain a letter';
  if (!/\p{N}/u.test(password)) return 'password must contain a number';
  if (!/[^\p{L}\p{N}\s]/u.test(password)) return 'password must contain a special character';
  return null;
}
