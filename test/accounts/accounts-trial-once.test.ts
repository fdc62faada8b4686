import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { STRONG_PASSWORD } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import { queryRows } from '../../src/db/client.js';
import { markEmailVerified } from '../../src/accounts/service.js';
import { canonicalMailbox } from '../../src/accounts/trial-addresses.js';
import type { Registered } from '../helpers/answers.js';

// One trial per address (CONTRACT §8; docs/accounts.md § One trial per address): register, spend, delete,
// register again with the same mailbox (another spelling of it) gives no second trial, while tokens can
// still be bought; the deleted account's address is kept only as a keyed hash.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const api = () => client(server.url);
type OwnerBalance = { unallocated_credits: number; lifetime_granted_credits: number };
type Transaction = { transaction_type: string; amount_credits: number };

/** Registers through the API, verifies the address, signs in: the new account's session and client. */
async function registerAndSignIn(email: string) {
  const reg = await api().post<Registered>('/v1/register', {
    email,
    name: 'Trial Person',
    password: STRONG_PASSWORD,
  });
  expect(reg.status, JSON.stringify(reg.body)).toBe(200);
  await markEmailVerified(server.deps.db, reg.body.user.id);
  const login = await api().post<{ session_token: string }>('/v1/login', {
    email,
    password: STRONG_PASSWORD,
  });
  expect(login.status).toBe(200);
  return { session: login.body.session_token, clientId: reg.body.client.id, userId: reg.body.user.id };
}

async function trialOf(who: { session: string; clientId: string }) {
  const owner = await api().get<OwnerBalance>('/v1/owner/balance', { token: who.session });
  const client = await api().get<{ balance_credits: number }>(`/v1/clients/${who.clientId}/credits/balance`, {
    token: who.session,
  });
  const txs = await api().get<Transaction[]>(`/v1/clients/${who.clientId}/credits/transactions`, {
    token: who.session,
  });
  return {
    lifetime: owner.body.lifetime_granted_credits,
    balance: client.body.balance_credits,
    trials: txs.body.filter((t) => t.transaction_type === 'trial').length,
  };
}

/** Pays a dev checkout like a browser: its page's cookie and CSRF field, then `decision=pay`. */
async function payDevCheckout(checkoutUrl: string) {
  const page = await fetch(checkoutUrl);
  const text = await page.text();
  const cookie = page.headers
    .getSetCookie()
    .map((c) => c.split(';')[0])
    .join('; ');
  const csrf = /name="csrf_token" value="([^"]+)"/.exec(text)![1]!;
  const action = new URL(/<form method="post" action="([^"]+)"/.exec(text)![1]!, checkoutUrl);
  return fetch(action, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie, origin: action.origin },
    body: new URLSearchParams({ csrf_token: csrf, decision: 'pay' }).toString(),
    redirect: 'manual',
  });
}

const deleteAccount = (session: string) =>
  api().post('/v1/account/delete', { password: STRONG_PASSWORD }, { token: session });

describe('the trial address rule', () => {
  it('compares case everywhere, dots and plus-tags at Gmail, plus-tags at providers that document them', () => {
    expect(canonicalMailbox(' Jane.Doe+news@GoogleMail.com ')).toBe('janedoe@gmail.com');
    expect(canonicalMailbox('j.a.n.e.doe@gmail.com')).toBe('janedoe@gmail.com');
    expect(canonicalMailbox('jane+x@outlook.com')).toBe('jane@outlook.com');
    expect(canonicalMailbox('jane+x@icloud.com')).toBe('jane@icloud.com');
    expect(canonicalMailbox('jane+x@fastmail.com')).toBe('jane@fastmail.com');
    // Elsewhere a dot or a plus may make another mailbox: only the case is folded.
    expect(canonicalMailbox('Jane.Doe+x@Example.com')).toBe('jane.doe+x@example.com');
    expect(canonicalMailbox('jane.doe@outlook.com')).toBe('jane.doe@outlook.com');
  });
});

describe('one trial per address', () => {
  it('a mailbox whose account was deleted gets no second trial, in any of its spellings, and can still buy tokens', async () => {
    const first = await registerAndSignIn('Jane.Doe+first@gmail.com');
    expect(await trialOf(first)).toEqual({ lifetime: 50_000, balance: 50_000, trials: 1 });
    expect((await deleteAccount(first.session)).status).toBe(200);

    // Kept as a keyed hash only: no row holds the address or its normalised form.
    const rows = await queryRows<Record<string, unknown>>(
      server.deps.db,
      sql`select * from used_trial_addresses`,
    );
    expect(rows.length).toBeGreaterThanOrEqual(1);
    expect(JSON.stringify(rows)).not.toMatch(/jane|doe|gmail/i);

    for (const spelling of ['janedoe@googlemail.com', 'JANE.DOE+again@gmail.com']) {
      const again = await registerAndSignIn(spelling);
      expect(await trialOf(again), spelling).toEqual({ lifetime: 0, balance: 0, trials: 0 });
      // It can buy tokens: a top-up through the dev processor credits the client.
      const topup = await api().post<{ checkout_url: string }>(
        `/v1/clients/${again.clientId}/credits/topup`,
        { amount_usd: 1_000, success_url: 'https://app.example/ok', cancel_url: 'https://app.example/no' },
        { token: again.session },
      );
      expect(topup.status, JSON.stringify(topup.body)).toBe(200);
      expect((await payDevCheckout(topup.body.checkout_url)).status).toBe(303);
      expect(await trialOf(again), spelling).toEqual({ lifetime: 10_000, balance: 10_000, trials: 0 });
      expect((await deleteAccount(again.session)).status).toBe(200);
    }
  });

  it('another mailbox still gets its trial', async () => {
    const a = await registerAndSignIn('sam.smith@example.com');
    expect((await deleteAccount(a.session)).status).toBe(200);
    // At a provider where dots are not aliases, sam.smith and samsmith are two mailboxes.
    const b = await registerAndSignIn('samsmith@example.com');
    expect(await trialOf(b)).toEqual({ lifetime: 50_000, balance: 50_000, trials: 1 });
    // And the deleted one's exact address, back again, does not.
    const c = await registerAndSignIn('Sam.Smith@example.com');
    expect(await trialOf(c)).toEqual({ lifetime: 0, balance: 0, trials: 0 });
  });
});
