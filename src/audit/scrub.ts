// No audit event holds a secret, a token, a password, a code or a full e-mail link, in any field
// (CONTRACT §11). The callers put ids, names and amounts in `details`; this is the second line: a field
// named like a secret is dropped, and a string shaped like one (an `svc_` token, a signing secret, a JWT,
// a link carrying a token or code) is replaced, so a mistake in a caller cannot put one in the log.

const SECRET_KEYS = new Set([
  'token',
  'secret',
  'password',
  'code',
  'codes',
  'recovery_codes',
  'access_token',
  'refresh_token',
  'client_secret',
  'otpauth_uri',
  'link',
  'url_with_token',
]);

const SECRET_SHAPES = [
  /svc_[A-Za-z0-9_-]{20,}/,
  /whsec_[A-Za-z0-9_-]{8,}/,
  /\bsk_(?:live|test)_[A-Za-z0-9]{8,}/,
  /eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/,
  /[?&#](?:token|code|secret)=/i,
];

export const REDACTED = '[redacted]';

export function scrubDetails(value: unknown): unknown {
  if (typeof value === 'string') return SECRET_SHAPES.some((re) => re.test(value)) ? REDACTED : value;
  if (Array.isArray(value)) return value.map(scrubDetails);
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [key, v] of Object.entries(value)) {
      if (SECRET_KEYS.has(key.toLowerCase())) continue;
      if (v === undefined) continue;
      out[key] = scrubDetails(v);
    }
    return out;
  }
  return value;
}

/** A user agent is the client's to write; one shaped like a secret is not kept either. */
export const scrubText = (value: string | null): string | null =>
  value === null ? null : (scrubDetails(value) as string);
