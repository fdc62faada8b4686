import { randomBytes } from 'node:crypto';

// Secret `svc_` + 43 base64url characters (32 random bytes) (CONTRACT §6).
export const API_TOKEN_PATTERN = /^svc_[A-Za-z0-9_-]{43}$/;

export function generateApiTokenSecret(): string {
  return `svc_${randomBytes(32).toString('base64url')}`;
}

/** What a list shows so a person can tell tokens apart: never enough to use. */
export const tokenPrefixOf = (secret: string): string => secret.slice(0, 8);
