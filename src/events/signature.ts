import { createHmac, timingSafeEqual } from 'node:crypto';

// The signature of a delivery, shaped like Stripe's `Stripe-Signature` (docs/billing.md "Outbound
// events"): header `svc-signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`, keyed
// with the endpoint's secret (the whole `whsec_…` string, as given once at creation). The timestamp is
// signed with the body, so a receiver can refuse an old delivery replayed (we suggest 5 minutes).

export const SIGNATURE_HEADER = 'svc-signature';

export function signatureOf(secret: string, timestamp: number, body: string): string {
  return createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex');
}

export const signatureHeader = (secret: string, timestamp: number, body: string): string =>
  `t=${timestamp},v1=${signatureOf(secret, timestamp, body)}`;

/**
 * What a receiver does: true when `header` carries a v1 signature of `body` under `secret`, dated within
 * `toleranceSeconds` of `now` (either side).
 */
export function verifySignature(
  secret: string,
  header: string,
  body: string,
  toleranceSeconds = 300,
  now = Math.floor(Date.now() / 1000),
): boolean {
  const parts = header.split(',').map((p) => p.trim().split('=', 2) as [string, string | undefined]);
  const t = Number(parts.find(([k]) => k === 't')?.[1]);
  if (!Number.isSafeInteger(t) || Math.abs(now - t) > toleranceSeconds) return false;
  const expected = Buffer.from(signatureOf(secret, t, body), 'hex');
  return parts.some(([k, v]) => {
    if (k !== 'v1' || !v || !/^[0-9a-f]{64}$/.test(v)) return false;
    return timingSafeEqual(Buffer.from(v, 'hex'), expected);
  });
}
