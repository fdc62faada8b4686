import { Router } from 'express';
import type { Deps } from '../deps.js';
import { notFound } from '../http/errors.js';
import { devCheckoutRoutes } from './dev-checkout.js';
import { devEvents } from './dev-events.js';
import { devInvoiceRoutes } from './dev-invoices.js';
import { devPortalRoutes } from './dev-portal.js';

// The dev processor's pages (CONTRACT §8): checkout, the billing portal and invoices, each delivering
// properly signed Stripe-shaped events through the same webhook code as Stripe's (dev-events.ts). 404
// unless the dev processor is the one in use.

export function devBillingRoutes(deps: Deps): Router {
  const router = Router();
  const ev = devEvents(deps);

  router.use(['/dev/checkout', '/dev/portal', '/dev/invoices'], (_req, _res, next) => {
    if (!deps.config.devMode || deps.billing.processor?.kind !== 'dev') throw notFound('no such route');
    next();
  });

  router.use(devCheckoutRoutes(deps, ev), devPortalRoutes(deps, ev), devInvoiceRoutes(deps, ev));
  return router;
}
