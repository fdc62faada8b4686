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

// A lone UTF-16 surrogate (a client may send one, escaped, in any JSON string) has no UTF-8 form:
// PostgreSQL refuses it in jsonb and re-encodes it in text, so the hash of what was stored would differ
// from the hash of what was written. It becomes U+FFFD before the event is hashed, as it would be stored.
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;
const wellFormed = (value: string): string => value.replace(LONE_SURROGATE, '\ufffd');

export function scrubDetails(value: unknown): unknown {
  if (typeof value === 'string')
    return SECRET_SHAPES.some((re) => re.test(value)) ? REDACTED : wellFormed(value);
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
