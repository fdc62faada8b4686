import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:net';
import { z } from 'zod';
import { startTestServer, type TestServer } from './helpers/server.js';
import { createUser } from './helpers/fixtures.js';
import { setOrgBalance } from './helpers/billing.js';
import { client } from './helpers/http.js';
import { detailError, readJson } from './helpers/json.js';
import { eventually } from './helpers/webhook-receiver.js';
import { createdEndpointAnswer, deliveryAnswer } from '../src/events/schema.js';

// Issue 19 item 5: outside DEV_MODE an owner's webhook endpoint never reaches a private or loopback
// address (src/http/outbound-guard.ts): an address literal is refused when the endpoint is registered, a
// name is checked against every address it resolves to when svc connects (DNS rebinding included).

let server: TestServer;
let api: ReturnType<typeof client>;
let listener: Server;
let connections = 0;
let port = 0;

beforeAll(async () => {
  server = await startTestServer({ env: { DEV_MODE: 'false', WEBHOOK_RETRY_BASE_MS: '200' } });
  api = client(server.url);
  listener = createServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  port = (listener.address() as { port: number }).port;
});
afterAll(async () => {
  await new Promise<void>((resolve) => listener?.close(() => resolve()));
  await server?.close();
});

describe('webhook endpoints outside DEV_MODE', () => {
  it('refuses http and private or loopback address literals when the endpoint is registered', async () => {
    const u = await createUser(server);
    for (const url of [
      `http://hooks.example/`,
      `https://127.0.0.1:${port}/hook`,
      'https://10.1.2.3/hook',
      'https://[::1]/hook',
      'https://169.254.169.254/latest/meta-data',
    ]) {
      const res = await api.post(
        `/v1/clients/${u.clientId}/webhook-endpoints`,
        { url, events: ['balance.low'] },
        { token: u.session },
      );
      expect(res.status, url).toBe(400);
      expect(readJson(detailError, res.body).detail.code).toBe('VALIDATION_ERROR');
    }
  });

  it('never connects to a name that resolves to loopback, and says so in the delivery log', async () => {
    const u = await createUser(server);
    const created = await api.post(
      `/v1/clients/${u.clientId}/webhook-endpoints`,
      { url: `https://localhost:${port}/hook`, events: ['balance.low'] },
      { token: u.session },
    );
    expect(created.status).toBe(200);
    const endpoint = readJson(createdEndpointAnswer, created.body);
    await api.put(
      `/v1/clients/${u.clientId}/balance-alert`,
      { threshold_credits: 100 },
      { token: u.session },
    );
    await setOrgBalance(server, u.orgKey, 100);
    await setOrgBalance(server, u.orgKey, 0);
    const log = async () => {
      const res = await api.get(`/v1/clients/${u.clientId}/webhook-endpoints/${endpoint.id}/deliveries`, {
        token: u.session,
      });
      return readJson(z.object({ data: z.array(deliveryAnswer) }), res.body).data;
    };
    await eventually(async () => ((await log())[0]?.attempts ?? 0) >= 2);
    const [row] = await log();
    expect(row).toMatchObject({
      event_type: 'balance.low',
      status: 'pending',
      last_status_code: null,
      last_error: 'refused: the endpoint resolves to a private or loopback address',
    });
    expect(connections).toBe(0);
  });
});
