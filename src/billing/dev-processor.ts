import { createHash } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { randomToken } from '../ids.js';
import type { PaymentMethodView, PaymentProcessor } from './processor.js';

// The embedded default processor (DEV_MODE without STRIPE_SECRET_KEY, CONTRACT §8). It records what a
// processor would, and its checkout page (dev-routes.ts) completes a payment by delivering signed
// Stripe-shaped events through the same webhook code as Stripe's.

/** A dev card ending in these digits is declined off-session (Stripe's test card 4000 0000 0000 0002). */
export const DEV_DECLINED_LAST4 = '0002';

export const devId = (prefix: string) => `${prefix}_dev_${randomToken(12)}`;

export function createDevProcessor(db: Db, v2Url: string): PaymentProcessor {
  return {
    kind: 'dev',
    createCustomer() {
      return Promise.resolve(devId('cus'));
    },
    createCheckoutSession() {
      const id = devId('cs');
      return Promise.resolve({ id, url: `${v2Url}/dev/checkout/${id}` });
    },
    async expireCheckoutSession(sessionId) {
      // The dev checkout page pays only an open session (dev-routes.ts claims it from 'open').
      const closed = await queryRows(
        db,
        sql`update billing_checkout_sessions set status = 'expired' where id = ${sessionId} and status = 'open' returning id`,
      );
      if (closed.length > 0) return 'expired';
      // Not open: being paid or paid ('paying', 'complete'), or closed before.
      const [row] = await queryRows<{ status: string }>(
        db,
        sql`select status from billing_checkout_sessions where id = ${sessionId}`,
      );
      return row && row.status !== 'expired' ? 'complete' : 'expired';
    },
    createPortalSession({ customerId, returnUrl }) {
      const u = new URL(`${v2Url}/dev/portal/${encodeURIComponent(customerId)}`);
      u.searchParams.set('return_url', returnUrl);
      return Promise.resolve(u.toString());
    },
    async chargeOffSession({ customerId, idempotencyKey }) {
      // The default card decides, as a test card does at Stripe: 4000 0000 0000 0002 (last4 0002) is
      // declined, any other succeeds. The intent's id follows from the idempotency key: a retry gets the
      // same intent. The payment_intent.succeeded event is delivered by the caller (auto-topup.ts).
      const [card] = await queryRows<{ last4: string }>(
        db,
        sql`select last4 from billing_payment_methods where customer_id = ${customerId}
            order by is_default desc, created_at limit 1`,
      );
      const id = `pi_dev_${createHash('sha256').update(idempotencyKey).digest('base64url').slice(0, 24)}`;
      if (!card) return { id: null, status: 'failed', failure: 'no saved payment method' };
      if (card.last4 === DEV_DECLINED_LAST4)
        return { id, status: 'failed', failure: 'Your card was declined.' };
      return { id, status: 'succeeded' };
    },
    async listPaymentMethods(customerId): Promise<PaymentMethodView[]> {
      const rows = await queryRows<Record<string, unknown>>(
        db,
        sql`select * from billing_payment_methods where customer_id = ${customerId} order by created_at`,
      );
      return rows.map((r) => ({
        id: String(r.id),
        type: 'card',
        brand: String(r.brand),
        last4: String(r.last4),
        exp_month: Number(r.exp_month),
        exp_year: Number(r.exp_year),
        is_default: Boolean(r.is_default),
      }));
    },
  };
}
