import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { detailError, readJson } from '../helpers/json.js';
import type { CreatedClient } from '../helpers/answers.js';
import { createUser, STRONG_PASSWORD } from '../helpers/fixtures.js';
import { mails, newEmail } from '../helpers/accounts-support.js';

// With SMTP_URL the account mails leave through SMTP (nodemailer) instead of the dev outbox
// (CONTRACT §4). The peer is a tiny SMTP sink on loopback speaking just enough of RFC 5321.

interface Received {
  from: string;
  to: string[];
  data: string;
}

async function startSmtpSink(): Promise<{ port: number; received: Received[]; server: Server }> {
  const received: Received[] = [];
  const server = createServer((socket) => {
    let buffer = '';
    let inData = false;
    let current: Received = { from: '', to: [], data: '' };
    socket.write('220 sink ESMTP\r\n');
    socket.on('data', (chunk) => {
      buffer += chunk.toString('utf8');
      let i;
      while ((i = buffer.indexOf('\r\n')) >= 0) {
        const line = buffer.slice(0, i);
        buffer = buffer.slice(i + 2);
        if (inData) {
          if (line === '.') {
            inData = false;
            received.push(current);
            current = { from: '', to: [], data: '' };
            socket.write('250 queued\r\n');
          } else current.data += `${line.startsWith('..') ? line.slice(1) : line}\r\n`;
          continue;
        }
        const verb = line.slice(0, 4).toUpperCase();
        if (verb === 'MAIL') current.from = line.slice(10);
        if (verb === 'RCPT') current.to.push(line.slice(8));
        if (verb === 'DATA') {
          inData = true;
          socket.write('354 go ahead\r\n');
        } else if (verb === 'QUIT') socket.end('221 bye\r\n');
        else socket.write('250 ok\r\n');
      }
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as { port: number }).port, received, server };
}

/** Undoes quoted-printable soft breaks and escapes, enough to read a link back. */
const unQuotedPrintable = (s: string) =>
  s.replace(/=\r\n/g, '').replace(/=([0-9A-F]{2})/g, (_m, h: string) => String.fromCharCode(parseInt(h, 16)));

let sink: Awaited<ReturnType<typeof startSmtpSink>>;
let server: TestServer;
beforeAll(async () => {
  sink = await startSmtpSink();
  server = await startTestServer({
    env: { SMTP_URL: `smtp://127.0.0.1:${sink.port}`, MAIL_FROM: 'svc <accounts@svc.test>' },
  });
});
afterAll(async () => {
  await server?.close();
  await new Promise((r) => sink?.server.close(r));
});

describe('SMTP delivery (SMTP_URL)', () => {
  it('sends the verification mail through SMTP, not to the dev outbox, and its link verifies', async () => {
    const api = client(server.url);
    const email = newEmail('smtp');
    expect((await api.post('/v1/register', { email, name: 'Sam', password: STRONG_PASSWORD })).status).toBe(
      200,
    );
    const mail = sink.received.find((m) => m.to.some((t) => t.includes(email)));
    expect(mail, 'a mail reached the SMTP peer').toBeDefined();
    expect(mail!.from).toContain('accounts@svc.test');
    const body = unQuotedPrintable(mail!.data);
    expect(body).toMatch(/^Subject: Verify your e-mail address/m);
    const m = new RegExp(
      `${server.v2Url.replace(/\./g, '\\.')}/account/verify\\?token=([A-Za-z0-9_-]+)`,
    ).exec(body);
    expect(m).not.toBeNull();
    expect(await mails(api, email)).toEqual([]);
    expect((await api.post('/v1/email/verify', { token: m![1] })).body).toEqual({ verified: true });
  });

  it('keeps answering when the SMTP server is unreachable: the account exists and reset reveals nothing', async () => {
    const closed = await startSmtpSink();
    await new Promise((r) => closed.server.close(r));
    const down = await startTestServer({ env: { SMTP_URL: `smtp://127.0.0.1:${closed.port}` } });
    try {
      const api = client(down.url);
      const email = newEmail('down');
      expect((await api.post('/v1/register', { email, name: 'D', password: STRONG_PASSWORD })).status).toBe(
        200,
      );
      expect((await api.post('/v1/login', { email, password: STRONG_PASSWORD })).status).toBe(200);
      const known = await api.post('/v1/password/reset/request', { email });
      const unknown = await api.post('/v1/password/reset/request', { email: newEmail('ghost') });
      expect(known.status).toBe(200);
      expect(known.body).toEqual(unknown.body);
      // A mail the caller is waiting for (an invitation) is 503 with Retry-After: the relay's outage, never 500.
      const owner = await createUser(down);
      const team = await api.post<CreatedClient>('/v1/clients', { name: 'Team' }, { token: owner.session });
      const invited = await api.post(
        `/v1/clients/${team.body.id}/invitations`,
        { email: newEmail('invitee') },
        { token: owner.session },
      );
      expect(invited.status, JSON.stringify(invited.body)).toBe(503);
      expect(readJson(detailError, invited.body).detail.code).toBe('MAIL_UNAVAILABLE');
      expect(invited.headers.get('retry-after')).toBe('5');
    } finally {
      await down.close();
    }
  });
});
