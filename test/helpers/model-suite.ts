import { afterAll, beforeAll, beforeEach } from 'vitest';
import { startTestServer, type TestServer } from './server.js';
import { createApiToken, createUser, type TestUser } from './fixtures.js';
import { setOrgBalance } from './billing.js';
import { startFakeUpstream, type FakeUpstream } from './fake-upstream.js';

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
