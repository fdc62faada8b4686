import { Router, type Request } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { principalOf, type Auth } from '../auth/principal.js';
import { notFound } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { clientIdOf } from '../ids.js';
import { callerRole } from '../orgs/caller.js';
import { BUDGET_PERIODS } from '../db/tables/budgets.js';
import { clearBudget, listBudgets, setBudget, tokenHolder, type BudgetTarget } from './budgets.js';
import { auditOriginOf } from '../audit/context.js';

// Member budgets over HTTP: the owner sets and clears a member's budget, or one of the
// member's tokens'; every member reads their own (GET …/budget). The hold enforces them.

export const budgetBody = z.object({
  period: z.enum(BUDGET_PERIODS),
  budget_credits: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
});

const userIdParam = z.string().min(1).max(100);
const tokenIdParam = z.coerce.number().int().min(1).max(2_147_483_647);

export function budgetRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const { db } = deps;
  const signedIn = auth.require();

  async function memberTarget(req: Request): Promise<BudgetTarget> {
    const { org } = await callerRole(deps, req, 'owner');
    const userId = parse(userIdParam, req.params.user_id);
    return { orgKey: org.id, userId, apiTokenId: null };
  }

  async function tokenTarget(req: Request): Promise<BudgetTarget> {
    const { org } = await callerRole(deps, req, 'owner');
    const parsed = tokenIdParam.safeParse(req.params.token_id);
    if (!parsed.success) throw notFound('no such active token of this client');
    const userId = await tokenHolder(db, org.id, parsed.data);
    return { orgKey: org.id, userId, apiTokenId: parsed.data };
  }

  // The caller's own budgets in this client: theirs as a member and their tokens'. A read of §8's billing
  // routes, so a grant with scope `account` reads it too (CONTRACT §7): `svc` explains a 402 with it.
  router.get('/v1/clients/:client_id/budget', auth.require({ grantReads: true }), async (req, res) => {
    const { org } = await callerRole(deps, req, 'viewer');
    const userId = principalOf(req).userId;
    const mine = await listBudgets(db, org.id, userId);
    res.json({
      client_id: clientIdOf(org.id),
      user_id: userId,
      budget: mine.find((b) => b.token_id === null) ?? null,
      token_budgets: mine.filter((b) => b.token_id !== null),
    });
  });

  // Every budget of the client (the owner's billing page).
  router.get('/v1/clients/:client_id/budgets', signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    res.json({ data: await listBudgets(db, org.id) });
  });

  router.put('/v1/clients/:client_id/members/:user_id/budget', signedIn, async (req, res) => {
    const target = await memberTarget(req);
    const body = parse(budgetBody, req.body ?? {});
    res.json(await setBudget(db, target, body.period, body.budget_credits, auditOriginOf(req)));
  });

  router.delete('/v1/clients/:client_id/members/:user_id/budget', signedIn, async (req, res) => {
    await clearBudget(db, await memberTarget(req), auditOriginOf(req));
    res.json({ removed: true });
  });

  router.put('/v1/clients/:client_id/tokens/:token_id/budget', signedIn, async (req, res) => {
    const target = await tokenTarget(req);
    const body = parse(budgetBody, req.body ?? {});
    res.json(await setBudget(db, target, body.period, body.budget_credits, auditOriginOf(req)));
  });

  router.delete('/v1/clients/:client_id/tokens/:token_id/budget', signedIn, async (req, res) => {
    await clearBudget(db, await tokenTarget(req), auditOriginOf(req));
    res.json({ removed: true });
  });

  return router;
}
