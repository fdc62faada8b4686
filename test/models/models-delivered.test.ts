import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { type TestServer } from '../helpers/server.js';
import { modelSuite } from '../helpers/model-suite.js';
import { type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { type FakeUpstream } from '../helpers/fake-upstream.js';
import { queryRows } from '../../src/db/client.js';
import { orgBalanceCredits, reserveCredits } from '../../src/billing/spend.js';
import { settleWithExcess } from '../../src/billing/debt.js';
import { ownerBalance } from '../../src/billing/service.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { countedCall } from '../helpers/counted.js';
import { grantToOrg, SOURCE_PURCHASES } from '../../src/billing/ledger.js';
import type { Db } from '../../src/db/client.js';

// What a call delivered is billed, and the reserve is an upper bound for every kind of input (CONTRACT
// §8). The fake provider over HTTP, the openai SDK as the client;
// prices make a call debit exactly prompt + 2 × completion tokens. Every test checks the ledger: the
// usage rows' sum is the real cost, no hold is left, the invariants (billing:reconcile) hold.

let server: TestServer;
let fake: FakeUpstream;
let owner: TestUser;
let key: string;

const suite = modelSuite({ MODEL_PART_TOKENS_IMAGE: '1600' });
beforeAll(() => void ({ server, fake, owner, key } = suite));

const sdk = () => new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 20_000 });
const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`).join(' ');

/** The ledger after a test: usage debited since `sinceId`, holds still held, the invariants. */
async function ledger(sinceId: number) {
  const [usage] = await queryRows<{ total: unknown; rows: unknown }>(
    server.deps.db,
    sql`select coalesce(sum(amount), 0)::bigint as total, count(*)::int as rows from billing_entries
        where org_key = ${owner.orgKey} and type = 'usage' and id > ${sinceId}`,
  );
  const [held] = await queryRows<{ n: unknown }>(
    server.deps.db,
    sql`select count(*)::int as n from billing_holds where org_key = ${owner.orgKey} and status = 'held'
          and user_id is not null`,
  );
  return {
    debited: Number(usage!.total),
    rows: Number(usage!.rows),
    holdsLeft: Number(held!.n),
    violations: await checkInvariants(server.deps.db),
  };
}

const ownerBalanceOf = (u: TestUser) => ownerBalance(server.deps.db, u.userId);

async function lastEntryId(): Promise<number> {
  const [row] = await queryRows<{ id: unknown }>(
    server.deps.db,
    sql`select coalesce(max(id), 0)::bigint as id from billing_entries`,
  );
  return Number(row!.id);
}

describe('delivered output is billed (item 5)', () => {
  it('a provider failing after 399 content chunks bills the 399 delivered, as the stream meter counts', async () => {
    const since = await lastEntryId();
    fake.reply = () => ({ content: words(500) });
    fake.breakAfterChunks = 399;
    fake.chunkDelayMs = 1; // each chunk leaves before the socket is cut
    const messages = [{ role: 'user' as const, content: 'Write five hundred words' }];
    const stream = await sdk().chat.completions.create({ model: 'm', messages, stream: true });
    let delivered = 0;
    let text = '';
    const err = await (async () => {
      for await (const chunk of stream)
        if (chunk.choices[0]?.delta.content) {
          delivered++;
          text += chunk.choices[0].delta.content;
        }
    })().then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeTruthy(); // an error event, no [DONE]
    expect(delivered).toBe(399);
    // The prompt and the 399 delivered chunks, counted with the tokenizer (CONTRACT §9).
    const { debit } = await countedCall(fake.requests.at(-1)!.body, text);
    const l = await ledger(since);
    expect(l).toEqual({ debited: debit, rows: 1, holdsLeft: 0, violations: [] });
  });

  it('a provider failing before any content debits nothing', async () => {
    const since = await lastEntryId();
    fake.breakAfterChunks = 0;
    fake.chunkDelayMs = 5; // the headers and the role chunk leave; no content does
    await (async () => {
      const stream = await sdk().chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      });
      for await (const _ of stream);
    })().catch(() => {});
    expect(await ledger(since)).toEqual({ debited: 0, rows: 0, holdsLeft: 0, violations: [] });
  });

  it('a JSON reply without usage bills its 2,000 words as the tokenizer counts them, as a stream is counted', async () => {
    const since = await lastEntryId();
    fake.reply = () => ({ content: words(2_000) });
    fake.omitUsage = true;
    const messages = [{ role: 'user' as const, content: 'Write two thousand words' }];
    const res = await sdk().chat.completions.create({ model: 'm', messages });
    expect(res.choices[0]!.message.content!.split(' ')).toHaveLength(2_000);
    const { debit } = await countedCall(fake.requests.at(-1)!.body, res.choices[0]!.message.content!);
    expect(await ledger(since)).toEqual({
      debited: debit,
      rows: 1,
      holdsLeft: 0,
      violations: [],
    });
  });
});

describe('the reserve bounds every kind of input (item 3)', () => {
  const image = { type: 'image_url' as const, image_url: { url: 'https://img.example/a.png' } };

  it('counts each image at MODEL_PART_TOKENS_IMAGE, so 100 images reported at 153,020 tokens are billed whole', async () => {
    await setOrgBalance(server, owner.orgKey, 200_000);
    const since = await lastEntryId();
    fake.reply = () => ({ content: 'one two three four five', promptTokens: 153_020 });
    const res = await sdk().chat.completions.create({
      model: 'm',
      max_tokens: 10,
      messages: [
        {
          role: 'user',
          content: [{ type: 'text', text: 'Describe these' }, ...Array<typeof image>(100).fill(image)],
        },
      ],
    });
    expect(res.usage).toMatchObject({ prompt_tokens: 153_020, completion_tokens: 5 });
    expect(await ledger(since)).toEqual({ debited: 153_020 + 10, rows: 1, holdsLeft: 0, violations: [] });
    expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBe(200_000 - 153_030);
  });

  it('a balance that cannot pay the images’ bound is 402 before the provider is called', async () => {
    await setOrgBalance(server, owner.orgKey, 10_000);
    const sent = fake.requests.length;
    const err = await sdk()
      .chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: Array(100).fill(image) }],
      })
      .catch((e: unknown) => e);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(402);
    expect(fake.requests.length).toBe(sent);
  });

  it.each([
    ['input_audio', { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }],
    ['file', { type: 'file', file: { file_id: 'file-1' } }],
    ['made_up', { type: 'made_up', x: 1 }],
  ])('refuses a %s part with 400 unsupported_content when its kind is not configured', async (_, part) => {
    const sent = fake.requests.length;
    const err = await sdk()
      .chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }, part] as never }],
      })
      .catch((e: unknown) => e);
    const apiErr = err as InstanceType<typeof OpenAI.APIError>;
    expect(apiErr.status).toBe(400);
    expect(apiErr.code).toBe('unsupported_content');
    expect(apiErr.param).toBe('messages.0.content.1.type');
    expect(fake.requests.length).toBe(sent);
  });

  it('holds n × max_tokens of output: n multiplies the output the hold pays for', async () => {
    await setOrgBalance(server, owner.orgKey, 10_000);
    fake.reply = () => ({ content: 'hello' });
    await sdk().chat.completions.create({
      model: 'm',
      n: 4,
      max_tokens: 2_000,
      messages: [{ role: 'user', content: 'hi' }],
    });
    // 10,000 tokens pay for under 5,000 output tokens at 2 each: 4 choices get at most 1,2xx each.
    const capped = fake.requests.at(-1)!.body.max_tokens as number;
    expect(capped * 4 * 2).toBeLessThanOrEqual(10_000);
    expect(capped).toBeLessThan(2_000);
  });
});

describe('usage beyond the hold (item 3)', () => {
  it('debits the excess up to the balance and records the rest as the owner’s debt, never a silent loss', async () => {
    await setOrgBalance(server, owner.orgKey, 20_000);
    const since = await lastEntryId();
    fake.reply = () => ({ content: 'one two three four five', promptTokens: 50_000 });
    const res = await sdk()
      .chat.completions.create({ model: 'm', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
    expect(res.data.usage).toMatchObject({ prompt_tokens: 50_000, completion_tokens: 5 });
    // The real cost is 50,010 tokens: 20,000 from the balance (the hold, then the excess), 30,010 owed.
    const l = await ledger(since);
    expect(l).toMatchObject({ debited: 20_000, rows: 2, holdsLeft: 0, violations: [] });
    expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBe(0);
    const balance = await fetch(`${server.url}/v1/owner/balance`, {
      headers: { authorization: `Bearer ${owner.session}` },
    });
    expect(((await balance.json()) as { debt_credits: number }).debt_credits).toBe(30_010);
    // The next grant (the real grant code) pays the debt first; the rest reaches the client.
    await server.deps.db.transaction((tx) =>
      grantToOrg(tx as unknown as Db, {
        key: `grant:test-excess:${owner.orgKey}`,
        source: SOURCE_PURCHASES,
        ownerId: owner.userId,
        orgKey: owner.orgKey,
        amount: 40_000,
        type: 'topup',
        description: 'a later purchase',
      }),
    );
    expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBe(40_000 - 30_010);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
});

describe('the excess is charged exactly once, whichever path settles (item 3)', () => {
  it('a settle repeated after a grant (a retry or spool replay) charges nothing more, though the balance could pay now', async () => {
    await setOrgBalance(server, owner.orgKey, 50);
    const since = await lastEntryId();
    const requestId = `test-excess-once-${since}`;
    await reserveCredits(server.deps.db, {
      orgKey: owner.orgKey,
      userId: owner.userId,
      requestId,
      minCredits: 50,
      maxCredits: 50,
    });
    const input = { requestId, actualCredits: 500, description: 'excess once' };
    // The hold pays 50; nothing is left unheld, so all 450 of the excess is the owner's debt.
    expect(await settleWithExcess(server.deps.db, server.deps.log, input)).toMatchObject({
      debitedCredits: 50,
    });
    const debt = async () => (await ownerBalanceOf(owner)).debt_credits;
    expect(await debt()).toBe(450);
    await server.deps.db.transaction((tx) =>
      grantToOrg(tx as unknown as Db, {
        key: `grant:test-excess-once:${since}`,
        source: SOURCE_PURCHASES,
        ownerId: owner.userId,
        orgKey: owner.orgKey,
        amount: 10_000,
        type: 'topup',
        description: 'a later purchase',
      }),
    );
    expect(await debt()).toBe(0);
    // The same settle again (its first answer was lost): the first result stands, no second charge.
    expect(await settleWithExcess(server.deps.db, server.deps.log, input)).toMatchObject({
      debitedCredits: 50,
    });
    const l = await ledger(since);
    expect(l).toMatchObject({ debited: 50, rows: 1, violations: [] });
    expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBe(10_000 - 450);
  });
});

describe('a request nested too deeply to measure', () => {
  it('is 400 validation_error, never 500, inside a content part and inside a tool', async () => {
    // Built as text: JSON.stringify itself overflows on it.
    const deep = '{"a":'.repeat(20_000) + '"x"' + '}'.repeat(20_000);
    for (const body of [
      `"messages":[{"role":"user","content":[{"type":"text","text":"hi","deep":${deep}}]}]`,
      `"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"deep":${deep}}}}]`,
    ]) {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: `{"model":"m",${body}}`,
      });
      // A body parser's own depth limit answers 400 too; either way never a 500.
      expect(res.status).toBe(400);
      const json = (await res.json()) as { error: { code: string } };
      expect(json.error.code).toBe('validation_error');
    }
    const health = await fetch(`${server.url}/healthz`);
    expect(health.status).toBe(200);
  });
});
