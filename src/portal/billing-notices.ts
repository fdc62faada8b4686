import type { Deps } from '../deps.js';
import type { Notice } from './components.js';

// The billing page's notices (after a checkout, after an owner's form) and the origins its forms may
// lead to (the processor's checkout and portal).

/** Where checkout and portal redirects may lead: our own dev processor's pages, or Stripe's. */
export const processorOrigins = (deps: Deps) => [
  new URL(deps.config.v2Url).origin,
  'https://checkout.stripe.com',
  'https://billing.stripe.com',
];

export const CHECKOUT_NOTICES: Record<string, Notice> = {
  success: {
    kind: 'ok',
    text: 'Payment received. The tokens appear here as soon as the processor confirms it (usually within seconds).',
  },
  cancelled: { kind: 'info', text: 'Checkout cancelled. Nothing was charged.' },
  declined: {
    kind: 'error',
    text: 'The card was declined. Nothing was charged; try another card or payment method.',
  },
};
export const NOTICES: Record<string, Notice> = {
  allocated: { kind: 'ok', text: 'Allocations saved.' },
  alert_saved: { kind: 'ok', text: 'Low-balance alert saved.' },
  endpoint_added: { kind: 'ok', text: 'Webhook endpoint added.' },
  endpoint_removed: { kind: 'ok', text: 'Webhook endpoint removed.' },
  autotopup_saved: { kind: 'ok', text: 'Auto top-up saved: it is on.' },
  autotopup_off: { kind: 'ok', text: 'Auto top-up turned off.' },
  budget_saved: { kind: 'ok', text: 'Budget saved.' },
  budget_removed: { kind: 'ok', text: 'Budget removed.' },
};
