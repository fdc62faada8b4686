import { Router, type Request } from 'express';
import { z } from 'zod';
import { pageQuery } from '../http/pagination.js';
import type { Deps } from '../deps.js';
import { assertCredentialReaches, principalOf, type Auth } from '../auth/principal.js';
import { errorOf, noAccess } from '../http/errors.js';
import { BILLING_ERRORS } from './errors.js';
import { parse } from '../http/validate.js';
import { parseOrgId } from '../ids.js';
import { liveRole } from '../orgs/membership.js';
import { findLiveOrg, ownerBalance, setAllocation } from './service.js';
import { balanceReads } from './balance-reads.js';
import { expressRead } from '../http/read-row.js';
import {
  getSubscription,
  listInvoices,
  listTransactions,
  openPortal,
  paymentMethods,
  startCheckout,
} from './payments.js';
import { receiveWebhook } from './webhooks.js';
import { devBillingRoutes } from './dev-routes.js';
import { balanceAlertRoutes } from './alert-routes.js';
import { budgetRoutes } from './budget-routes.js';
import { autoTopupRoutes } from './auto-topup-routes.js';
import { databaseOutageAs503 } from '../db/outage.js';
import { webhookEvents } from '../metrics/registry.js';
import { auditOriginOf } from '../audit/context.js';

// The billing routes of the interface document (Billing endpoints, rules 1–5) with CONTRACT §8's
// access rules: a session or an svc_ bearer; live members other than viewers read their client's
// billing; only the owner allocates, checks out, tops up or opens the portal (else 403 NO_ACCESS).

const httpUrl = z.url({ protocol: /^https?$/ }).max(2048);

export const allocationBody = z.object({
  target_credits: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
});

export const checkoutBody = z.object({
  price_id: z.string().min(1).max(255).optional(),
  success_url: httpUrl,
  cancel_url: httpUrl,
  customer_email: z.email().max(320).optional(),
});

/** CONTRACT §8: amount_usd in integer cents, 100 to 1,000,000. */
export const topupBody = z.object({
  amount_usd: z.number().int().min(100).max(1_000_000),
  success_url: httpUrl,
  cancel_url: httpUrl,
  customer_email: z.email().max(320).optional(),
});

export const portalBody = z.object({ return_url: httpUrl });

export function billingRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const { db } = deps;
  const signedIn = auth.require();
  // The GET routes: scope `account` grants read them too, under the same role rules (CONTRACT §7).
  const reads = auth.require({ grantReads: true });

  /** The client in the path, if the caller may use it at `need`; 403 NO_ACCESS otherwise (either spelling accepted). */
  async function clientFor(req: Request, need: 'read' | 'owner') {
    const principal = principalOf(req);
    const orgKey = parseOrgId(String(req.params.client_id ?? ''));
    const role = orgKey ? await liveRole(db, principal.userId, orgKey) : null;
    if (!orgKey || !role || role === 'viewer' || (need === 'owner' && role !== 'owner')) {
      throw noAccess(
        need === 'owner' ? "only the client's owner may do this" : "no access to this client's billing",
      );
    }
    assertCredentialReaches(principal, orgKey);
    return { orgKey, principal };
  }

  router.put('/v1/owner/orgs/:org_id/allocation', signedIn, async (req, res) => {
    const principal = principalOf(req);
    const orgKey = parseOrgId(String(req.params.org_id));
    const org = orgKey ? await findLiveOrg(db, orgKey) : null;
    // Interface document, Billing rule 1: only the org's owner may set an allocation.
    if (!org || org.ownerId !== principal.userId)
      throw noAccess("only the client's owner may set its allocation");
    assertCredentialReaches(principal, org.id);
    const { target_credits } = parse(allocationBody, req.body);
    // A hold this process took ahead for the client's next model call is not a call in flight: it goes
    // back first, so that only real calls can answer CREDITS_IN_USE (src/models/admission/spare-holds.ts).
    await deps.models.spares.release(org.id);
    await setAllocation(db, {
      userId: principal.userId,
      orgKey: org.id,
      target: target_credits,
      origin: auditOriginOf(req),
    });
    res.json(await ownerBalance(db, principal.userId));
  });

  // The balances, as the route table serves them too (src/billing/balance-reads.ts).
  for (const read of balanceReads(deps, auth)) router.get(read.path, ...expressRead(read));

  router.get('/v1/clients/:client_id/credits/transactions', reads, async (req, res) => {
    const { orgKey } = await clientFor(req, 'read');
    const { limit, offset, starting_after } = parse(pageQuery, req.query);
    res.json(await listTransactions(db, orgKey, limit, offset, starting_after));
  });

  router.get('/v1/clients/:client_id/subscription', reads, async (req, res) => {
    const { orgKey } = await clientFor(req, 'read');
    res.json(await getSubscription(db, orgKey));
  });

  router.get('/v1/clients/:client_id/invoices', reads, async (req, res) => {
    const { orgKey } = await clientFor(req, 'read');
    const { limit, offset, starting_after } = parse(pageQuery, req.query);
    res.json(await listInvoices(db, orgKey, limit, offset, starting_after));
  });

  router.get('/v1/clients/:client_id/payment-methods', reads, async (req, res) => {
    const { orgKey } = await clientFor(req, 'read');
    res.json(await paymentMethods(db, deps.billing, orgKey));
  });

  router.post('/v1/clients/:client_id/subscription/checkout', signedIn, async (req, res) => {
    const { orgKey, principal } = await clientFor(req, 'owner');
    const body = parse(checkoutBody, req.body);
    const pricePro = deps.config.stripe.pricePro;
    if (body.price_id !== undefined && body.price_id !== pricePro) {
      throw errorOf(BILLING_ERRORS, 'UNKNOWN_PRICE', `price_id must be the Pro plan's price (${pricePro})`);
    }
    res.json(
      await startCheckout(db, deps.billing, {
        orgKey,
        userId: principal.userId,
        email: body.customer_email ?? principal.email,
        kind: 'subscription',
        priceId: pricePro,
        successUrl: body.success_url,
        cancelUrl: body.cancel_url,
      }),
    );
  });

  router.post('/v1/clients/:client_id/credits/topup', signedIn, async (req, res) => {
    const { orgKey, principal } = await clientFor(req, 'owner');
    const body = parse(topupBody, req.body);
    res.json(
      await startCheckout(db, deps.billing, {
        orgKey,
        userId: principal.userId,
        email: body.customer_email ?? principal.email,
        kind: 'topup',
        amountCents: body.amount_usd,
        priceId: deps.config.stripe.pricePro,
        successUrl: body.success_url,
        cancelUrl: body.cancel_url,
      }),
    );
  });

  router.post('/v1/clients/:client_id/billing/portal', signedIn, async (req, res) => {
    const { orgKey, principal } = await clientFor(req, 'owner');
    const { return_url } = parse(portalBody, req.body);
    res.json({ portal_url: await openPortal(db, deps.billing, orgKey, principal.email, return_url) });
  });

  // Stripe's webhook: no user credential; the signature over the raw bytes is the authentication.
  router.post('/v1/webhooks/stripe', async (req, res) => {
    const result = await receiveWebhook(deps, req.rawBody, req.get('stripe-signature'), auditOriginOf(req));
    webhookEvents.inc({ duplicate: String(result.duplicate) });
    res.json({ received: true, duplicate: result.duplicate });
  });

  router.use(balanceAlertRoutes(deps, auth));
  router.use(budgetRoutes(deps, auth));
  router.use(autoTopupRoutes(deps, auth));
  router.use(devBillingRoutes(deps));
  // A database outage is 503 DATABASE_UNAVAILABLE on these routes, never 500 (src/db/outage.ts).
  router.use('/v1', databaseOutageAs503(deps.db));
  return router;
}
