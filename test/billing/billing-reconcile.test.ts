import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { sql } from 'drizzle-orm';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createUser } from '../helpers/fixtures.js';
import { mails } from '../helpers/accounts-support.js';
import { proLines, startFakeStripe, stripeEnv, type FakeStripe } from '../helpers/fake-stripe.js';
import { reconcile } from '../../src/billing/reconcile.js';
import { createLogger } from '../../src/log.js';

// Reconciliation: invariants against the database, and missed webhooks made good from
// Stripe's own records, idempotently.

let fake: FakeStripe;
let server: TestServer;
beforeAll(async () => {
  fake = await startFakeStripe();
  server = await startTestServer({ env: stripeEnv(fake, 'whsec_x') });
});
afterAll(async () => {
  await server?.close();
  await fake?.close();
});

const log = createLogger('silent');
// Only what the CLI needs: the test runner's own variables (Vite sets BASE_URL='/') are not svc config.
const cliEnv = () => ({
  PATH: process.env.PATH ?? '',
  HOME: process.env.HOME ?? '',
  DATABASE_URL: server.databaseUrl!,
  LOG_LEVEL: 'silent',
});

describe('billing reconciliation', () => {
  it('grants paid invoices and sessions whose webhooks were lost, once', async () => {
    const u = await createUser(server);
    const api = client(server.url);
    const res = await api.post<{ session_id: string }>(
      `/v1/clients/${u.clientId}/credits/topup`,
      { amount_usd: 700, success_url: 'https://a.example/ok', cancel_url: 'https://a.example/no' },
      { token: u.session },
    );
    const session = fake.sessions.get(res.body.session_id)!;
    Object.assign(session, { status: 'complete', payment_status: 'paid' });
    const t = Math.floor(Date.now() / 1000);
    fake.invoices.set('in_lost', {
      id: 'in_lost',
      object: 'invoice',
      customer: session.customer,
      status: 'paid',
      billing_reason: 'subscription_cycle',
      amount_due: 20_000,
      amount_paid: 20_000,
      currency: 'usd',
      created: t,
      parent: {
        type: 'subscription_details',
        subscription_details: { subscription: 'sub_lost', metadata: { org_key: u.orgKey } },
      },
      lines: proLines({ start: t, end: t + 2_592_000 }),
    });
    const first = await reconcile(server.deps.db, log, server.deps.billing.stripe, {
      proPriceId: server.deps.billing.proPriceId,
      mail: server.deps,
    });
    expect(first.granted.sort()).toEqual([`checkout session ${String(session.id)}`, 'invoice in_lost']);
    // The made-good top-up's receipt, as its webhook would have sent it: one, though reconcile ran twice.
    const receipts = async () =>
      (await mails(api, u.email)).filter((m) => m.subject.startsWith('Receipt:')).map((m) => m.subject);
    expect(first.violations).toEqual([]);
    const second = await reconcile(server.deps.db, log, server.deps.billing.stripe, {
      proPriceId: server.deps.billing.proPriceId,
      mail: server.deps,
    });
    expect(second.granted).toEqual([]);
    expect(await receipts()).toEqual([expect.stringMatching(/^Receipt: \$7\.00 for /)]);
    const bal = await api.get<{ balance_credits: number }>(`/v1/clients/${u.clientId}/credits/balance`, {
      token: u.session,
    });
    expect(bal.body.balance_credits).toBe(50_000 + 7_000 + 210_000);
    expect(fake.requests.some((r) => r.path === '/v1/invoices' && r.params.get('status') === 'paid')).toBe(
      true,
    );
  });

  it('reports a tampered balance, and the CLI exits 1 naming it', async () => {
    const u = await createUser(server);
    const clean = await reconcile(server.deps.db, log, null);
    expect(clean.violations).toEqual([]);
    await server.deps.db.execute(
      sql`update billing_accounts set balance = balance + 1 where id = ${`org:${u.orgKey}`}`,
    );
    try {
      const report = await reconcile(server.deps.db, log, null);
      expect(report.violations.map((v) => v.check)).toContain(
        'stored balance differs from the sum of its ledger rows',
      );
      expect(report.violations.map((v) => v.check)).toContain('accounts do not sum to zero');
      if (storageMode() === 'postgres') {
        const cli = await promisify(execFile)('node', ['--import', 'tsx', 'src/billing/reconcile-cli.ts'], {
          env: cliEnv(),
        }).then(
          () => ({ code: 0, stdout: '' }),
          (err: { code: number; stdout: string }) => ({ code: err.code, stdout: err.stdout }),
        );
        expect(cli.code).toBe(1);
        expect(cli.stdout).toContain('VIOLATION: stored balance differs from the sum of its ledger rows');
        expect(cli.stdout).toContain(`org:${u.orgKey}`);
      }
    } finally {
      await server.deps.db.execute(
        sql`update billing_accounts set balance = balance - 1 where id = ${`org:${u.orgKey}`}`,
      );
    }
    if (storageMode() === 'postgres') {
      const ok = await promisify(execFile)('node', ['--import', 'tsx', 'src/billing/reconcile-cli.ts'], {
        env: cliEnv(),
      });
      expect(ok.stdout).toContain('all ledger invariants hold');
    }
  }, 60_000);
});

describe('the ledger is append-only (one immutable row per movement)', () => {
  it('refuses UPDATE, DELETE and TRUNCATE of ledger rows in the database itself', async () => {
    const u = await createUser(server); // the trial writes ledger rows
    const db = server.deps.db;
    const rows = await db.execute(sql`select id from billing_entries where key = ${`trial:${u.userId}`}`);
    const id = (rows as { rows: { id: number }[] }).rows[0]?.id;
    expect(id).toBeTypeOf('number');
    const refused = (q: ReturnType<typeof sql>) =>
      db.execute(q).then(
        () => 'accepted',
        (err: unknown) =>
          String(
            (err as { message?: string; cause?: { message?: string } }).cause?.message ??
              (err as Error).message,
          ),
      );
    expect(await refused(sql`update billing_entries set amount = amount + 1 where id = ${id}`)).toMatch(
      /immutable/,
    );
    expect(await refused(sql`delete from billing_entries where id = ${id}`)).toMatch(/immutable/);
    expect(await refused(sql`truncate billing_entries cascade`)).toMatch(/immutable/);
    const after = await reconcile(db, log, null);
    expect(after.violations).toEqual([]);
  });
});
