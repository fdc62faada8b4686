import { afterAll, beforeAll, beforeEach } from 'vitest';
import OpenAI from 'openai';
import { startTestServer, type TestServer } from './server.js';
import { createApiToken, createUser, type TestUser } from './fixtures.js';
import { setOrgBalance } from './billing.js';
import { startFakeUpstream, TEST_PRICES, type FakeUpstream } from './fake-upstream.js';

export interface ModelSuite {
  server: TestServer;
  fake: FakeUpstream;
  owner: TestUser;
  /** The owner's `svc_` token for their default client. */
  key: string;
}

/**
 * The model routes' test bed for one file: svc in front of a fake provider (fake.env: prices that make
 * the arithmetic visible), an owner with an `svc_` token, and before each test a reset provider and a
 * 10,000-token allocation. The returned object is filled in beforeAll.
 */
export function modelSuite(env: Record<string, string> = {}): ModelSuite {
  const suite = {} as ModelSuite;
  beforeAll(async () => {
    suite.fake = await startFakeUpstream();
    suite.server = await startTestServer({ env: suite.fake.env(env) });
    suite.owner = await createUser(suite.server);
    suite.key = (await createApiToken(suite.server, suite.owner, suite.owner.orgKey)).secret;
  });
  afterAll(async () => {
    await suite.server?.close();
    await suite.fake?.close();
  });
  beforeEach(async () => {
    suite.fake.reset();
    await setOrgBalance(suite.server, suite.owner.orgKey, 10_000);
  });
  return suite;
}

export interface LocalModelSuite {
  server: TestServer;
  owner: TestUser;
  /** The official openai SDK, holding the owner's `svc_` token for their default client. */
  openai: OpenAI;
}

/**
 * The built-in offline model's test bed for one file: svc with no provider configured (so svc-local
 * answers) at the test prices, an owner allocated `balance` tokens once, and the openai SDK as their
 * `svc_` token. The returned object is filled in beforeAll.
 */
export function localModelSuite(balance: number): LocalModelSuite {
  const suite = {} as LocalModelSuite;
  beforeAll(async () => {
    suite.server = await startTestServer({ env: TEST_PRICES });
    suite.owner = await createUser(suite.server);
    const { secret } = await createApiToken(suite.server, suite.owner, suite.owner.orgKey);
    suite.openai = new OpenAI({ apiKey: secret, baseURL: `${suite.server.url}/v1`, maxRetries: 0 });
    await setOrgBalance(suite.server, suite.owner.orgKey, balance);
  });
  afterAll(async () => {
    await suite.server?.close();
  });
  return suite;
}
