import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { pool, rawRequest, type RawResult } from '../helpers/raw-http.js';
import type { DetailError, OpenAiError } from '../helpers/json.js';

// One hostile field at a time on an otherwise valid body (CONTRACT §3): the every-field bodies of
// test/robustness/robustness-input.test.ts stop at the first invalid field; here each field meets validation (and
// whatever lies behind it: reservations, limits, storage) alone. Never a 5xx.

let server: TestServer;
let user: TestUser;
let apiToken: string;
beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
  apiToken = (await createApiToken(server, user, user.orgKey)).secret;
});
afterAll(async () => {
  await server?.close();
});

const HOSTILE: unknown[] = [
  1e308,
  -1,
  2 ** 63,
  Number.MAX_SAFE_INTEGER,
  1e16,
  0,
  -0,
  0.5,
  true,
  null,
  {},
  [],
  [1, 'a'],
  'x'.repeat(100_000),
  'ünïcødé ✓ 💩 \u202e',
  '',
  [{}],
  [null],
  [{ role: 'user', content: 1e308 }],
  [{ role: 'user', content: [{ type: 'image_url', image_url: 'x' }] }],
  [{ role: 'tool', content: 'x', tool_call_id: 'nope' }],
  [{ role: 'assistant', content: null, tool_calls: [{ id: 'c', function: { name: 'x', arguments: '{' } }] }],
];

async function sweep(
  path: string,
  base: Record<string, unknown>,
  headers: Record<string, string>,
  check: (res: RawResult) => string | null,
) {
  const findings: string[] = [];
  // The base body itself is accepted, so each sweep really varies one field of a valid request.
  const ok = await rawRequest(server.url, 'POST', path, {
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(base),
  });
  expect(ok.status, `${path} base body: ${ok.text.slice(0, 200)}`).toBe(200);
  await pool(
    Object.keys(base).flatMap((field) =>
      HOSTILE.map((value) => async () => {
        const body = JSON.stringify({ ...base, [field]: value });
        const res = await rawRequest(server.url, 'POST', path, {
          headers: { 'content-type': 'application/json', ...headers },
          body,
        });
        const why = res.status >= 500 ? '5xx' : res.status >= 400 ? check(res) : null;
        if (why)
          findings.push(
            `${res.status} ${why}: ${field}=${JSON.stringify(value).slice(0, 60)} → ${res.text.slice(0, 200)}`,
          );
      }),
    ),
    4,
  );
  return findings;
}

const openai = (r: RawResult) => {
  const error = (r.json as Partial<OpenAiError> | undefined)?.error;
  return error && typeof error.message === 'string' && 'param' in error ? null : 'not OpenAI shape';
};
const detail = (r: RawResult) =>
  typeof (r.json as Partial<DetailError> | undefined)?.detail?.code === 'string' ? null : 'not {detail}';

describe('one hostile field at a time', () => {
  it('chat completions', async () => {
    const base = {
      model: 'svc-local',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 16,
      temperature: 1,
      top_p: 1,
      n: 1,
      stream: false,
      tools: [],
      stream_options: null,
      max_completion_tokens: 16,
      tool_choice: 'auto',
    };
    const findings = await sweep(
      '/v1/chat/completions',
      base,
      { authorization: `Bearer ${apiToken}` },
      openai,
    );
    expect(findings, findings.join('\n')).toEqual([]);
  });

  it('projects, clients, tokens', async () => {
    const h = { authorization: `Bearer ${user.session}` };
    const findings = [
      ...(await sweep(
        '/v1/projects',
        { org_id: user.orgId, name: 'p', description: 'd', brief: 'b' },
        h,
        detail,
      )),
      ...(await sweep('/v1/clients', { name: 'n' }, h, detail)),
      ...(await sweep('/v1/tokens', { client_id: user.orgId, name: 'n' }, h, detail)),
      ...(await sweep(
        `/v1/clients/${user.clientId}/credits/topup`,
        { amount_usd: 500, success_url: 'https://a.example/ok', cancel_url: 'https://a.example/no' },
        h,
        detail,
      )),
    ];
    expect(findings, findings.join('\n')).toEqual([]);
  });
});
