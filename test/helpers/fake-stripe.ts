import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import Stripe from 'stripe';
import { parseAs, type DetailError } from './json.js';

// A small node:http fake of the Stripe endpoints svc calls, for the real `stripe` SDK pointed at it
// through STRIPE_API_BASE (host, port, protocol). It records every request so tests can assert what
// was sent, and can be told to fail the next call the way Stripe does.

export interface FakeRequest {
  method: string;
  path: string;
  params: URLSearchParams;
  idempotencyKey: string | undefined;
}

type Obj = Record<string, unknown>;

export interface FakeStripe {
  url: string;
  requests: FakeRequest[];
  customers: Map<string, Obj>;
  sessions: Map<string, Obj>;
  invoices: Map<string, Obj>;
  refunds: Map<string, Obj>;
  disputes: Map<string, Obj>;
  paymentMethods: Obj[];
  /** PaymentIntents created (auto top-up's off-session charges), by id. */
  paymentIntents: Map<string, Obj>;
  /** Payment methods whose off-session charges are declined (Stripe's card_declined), by id. */
  declinedMethods: Set<string>;
  /** Payment methods whose off-session charges stay `processing` (a bank debit: the outcome comes later). */
  processingMethods: Set<string>;
  /** The next API call answers with this Stripe error (status and error object). */
  failNext: { status: number; error: Obj } | null;
  close(): Promise<void>;
}

const id = (prefix: string) => `${prefix}_${randomBytes(9).toString('hex')}`;
const now = () => Math.floor(Date.now() / 1000);

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

const list = (data: Obj[], url: string) => ({ object: 'list', data, has_more: false, url });

export async function startFakeStripe(): Promise<FakeStripe> {
  const state: FakeStripe = {
    url: '',
    requests: [],
    customers: new Map(),
    sessions: new Map(),
    invoices: new Map(),
    refunds: new Map(),
    disputes: new Map(),
    paymentMethods: [],
    paymentIntents: new Map(),
    declinedMethods: new Set(),
    processingMethods: new Set(),
    failNext: null,
    close: async () => {},
  };
  const byIdempotencyKey = new Map<string, Obj>();

  function route(
    method: string,
    path: string,
    params: URLSearchParams,
    idem: string | undefined,
  ): [number, Obj] {
    if (method === 'POST' && path === '/v1/customers') {
      if (idem && byIdempotencyKey.has(idem)) return [200, byIdempotencyKey.get(idem)!];
      const c = {
        id: id('cus'),
        object: 'customer',
        email: params.get('email'),
        metadata: { org_key: params.get('metadata[org_key]') },
        invoice_settings: { default_payment_method: null },
      };
      state.customers.set(c.id, c);
      if (idem) byIdempotencyKey.set(idem, c);
      return [200, c];
    }
    let m = /^\/v1\/customers\/([^/]+)$/.exec(path);
    if (method === 'GET' && m) {
      const c = state.customers.get(m[1]!);
      return c
        ? [200, c]
        : [
            404,
            {
              error: { type: 'invalid_request_error', code: 'resource_missing', message: 'No such customer' },
            },
          ];
    }
    m = /^\/v1\/customers\/([^/]+)\/payment_methods$/.exec(path);
    if (method === 'GET' && m)
      return [
        200,
        list(
          state.paymentMethods.filter((p) => p.customer === m![1]),
          path,
        ),
      ];
    if (method === 'POST' && path === '/v1/checkout/sessions') {
      const s = {
        id: id('cs_test'),
        object: 'checkout.session',
        mode: params.get('mode'),
        customer: params.get('customer'),
        url: `https://checkout.stripe.test/pay/${id('x')}`,
        status: 'open',
        payment_status: 'unpaid',
        amount_total: Number(params.get('line_items[0][price_data][unit_amount]') ?? 20_000),
        metadata: {
          org_key: params.get('metadata[org_key]'),
          kind: params.get('metadata[kind]'),
          credits: params.get('metadata[credits]'),
        },
        created: now(),
      };
      state.sessions.set(s.id, s);
      return [200, s];
    }
    if (method === 'GET' && path === '/v1/checkout/sessions')
      return [200, list([...state.sessions.values()], path)];
    m = /^\/v1\/checkout\/sessions\/([^/]+)(\/expire)?$/.exec(path);
    if (m) {
      const s = state.sessions.get(m[1]!);
      if (!s)
        return [
          404,
          {
            error: {
              type: 'invalid_request_error',
              code: 'resource_missing',
              message: 'No such checkout.session',
            },
          },
        ];
      if (method === 'GET' && !m[2]) return [200, s];
      if (method === 'POST' && m[2]) {
        // As Stripe: only an open session can be expired.
        if (s.status !== 'open')
          return [
            400,
            {
              error: {
                type: 'invalid_request_error',
                message: `Only Checkout Sessions with a status in ["open"] can be expired. This Checkout Session has a status of "${String(s.status)}".`,
              },
            },
          ];
        s.status = 'expired';
        return [200, s];
      }
    }
    if (method === 'POST' && path === '/v1/payment_intents') {
      // As Stripe: a repeated idempotency key answers the first result (a decline included).
      if (idem && byIdempotencyKey.has(idem)) {
        const first = byIdempotencyKey.get(idem)!;
        return first.object === 'error' ? [402, { error: first.error }] : [200, first];
      }
      const pm = params.get('payment_method');
      const declined = !!pm && state.declinedMethods.has(pm);
      const pi = {
        id: id('pi'),
        object: 'payment_intent',
        amount: Number(params.get('amount')),
        amount_received:
          declined || (pm && state.processingMethods.has(pm)) ? 0 : Number(params.get('amount')),
        currency: params.get('currency'),
        customer: params.get('customer'),
        payment_method: pm,
        confirm: params.get('confirm'),
        off_session: params.get('off_session'),
        status: declined
          ? 'requires_payment_method'
          : pm && state.processingMethods.has(pm)
            ? 'processing'
            : 'succeeded',
        metadata: Object.fromEntries(
          [...params.entries()]
            .filter(([k]) => k.startsWith('metadata['))
            .map(([k, v]) => [k.slice('metadata['.length, -1), v]),
        ),
        created: now(),
      };
      state.paymentIntents.set(pi.id, pi);
      if (declined) {
        const error = {
          type: 'card_error',
          code: 'card_declined',
          decline_code: 'generic_decline',
          message: 'Your card was declined.',
          payment_intent: pi,
        };
        if (idem) byIdempotencyKey.set(idem, { object: 'error', error });
        return [402, { error }];
      }
      if (idem) byIdempotencyKey.set(idem, pi);
      return [200, pi];
    }
    if (method === 'GET' && path === '/v1/invoices') return [200, list([...state.invoices.values()], path)];
    if (method === 'GET' && path === '/v1/refunds') return [200, list([...state.refunds.values()], path)];
    if (method === 'GET' && path === '/v1/disputes') return [200, list([...state.disputes.values()], path)];
    if (method === 'POST' && path === '/v1/billing_portal/sessions') {
      return [
        200,
        {
          id: id('bps'),
          object: 'billing_portal.session',
          customer: params.get('customer'),
          return_url: params.get('return_url'),
          url: `https://billing.stripe.test/p/session/${id('x')}`,
        },
      ];
    }
    return [
      404,
      { error: { type: 'invalid_request_error', message: `fake stripe: no route ${method} ${path}` } },
    ];
  }

  async function answer(req: IncomingMessage, res: ServerResponse) {
    const url = new URL(req.url ?? '/', 'http://fake');
    const body = await readBody(req);
    const params = new URLSearchParams(req.method === 'GET' ? url.search : body);
    const idem = req.headers['idempotency-key'] as string | undefined;
    state.requests.push({ method: req.method ?? 'GET', path: url.pathname, params, idempotencyKey: idem });
    let status: number;
    let payload: Obj;
    if (state.failNext) {
      ({ status, error: payload } = {
        status: state.failNext.status,
        error: { error: state.failNext.error },
      });
      state.failNext = null;
    } else {
      [status, payload] = route(req.method ?? 'GET', url.pathname, params, idem);
    }
    res.writeHead(status, { 'content-type': 'application/json', 'request-id': id('req') });
    res.end(JSON.stringify(payload));
  }
  // A request that fails midway (the client went away while its body was read) ends its socket.
  const server: Server = createServer((req, res) => {
    answer(req, res).catch((err: unknown) => res.destroy(err instanceof Error ? err : undefined));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  state.close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  return state;
}

const signer = new Stripe('sk_test_signer_only');

/** A Stripe event envelope around `object`. */
export function stripeEvent(type: string, object: Obj, opts: { id?: string; created?: number } = {}): string {
  return JSON.stringify({
    id: opts.id ?? id('evt'),
    object: 'event',
    api_version: '2026-10-28.endive',
    created: opts.created ?? now(),
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
    data: { object },
  });
}

/** The `stripe-signature` header Stripe would send for `payload`, signed with the SDK's own helper. */
export function signatureFor(payload: string, secret: string, timestamp?: number): string {
  return signer.webhooks.generateTestHeaderString({ payload, secret, ...(timestamp ? { timestamp } : {}) });
}

/** The webhook's answer (src/openapi/billing.ts), or the detail envelope when it refuses (CONTRACT §3). */
export type WebhookAnswer = { received?: true; duplicate?: boolean } & Partial<DetailError>;

/** POSTs a signed event to the server's webhook; returns status and body. */
export async function deliverWebhook(baseUrl: string, payload: string, signature: string) {
  const res = await fetch(`${baseUrl}/v1/webhooks/stripe`, {
    method: 'POST',
    headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-signature': signature },
    body: payload,
  });
  const text = await res.text();
  return { status: res.status, body: text ? parseAs<WebhookAnswer>(text) : null };
}

/** The Pro price the Stripe test files configure (STRIPE_PRICE_PRO). */
export const PRO_PRICE_TEST = 'price_pro_test';

/** An invoice's `lines` as Stripe sends a Pro invoice (pinned API: pricing.price_details.price). */
export const proLines = (period?: { start: number; end: number }, price = PRO_PRICE_TEST) => ({
  object: 'list',
  data: [
    {
      ...(period ? { period } : {}),
      pricing: { type: 'price_details', price_details: { price, product: 'prod_pro' } },
    },
  ],
});

/** svc's configuration pointed at this fake, with the webhook secret the test signs with. */
export const stripeEnv = (fake: FakeStripe, webhookSecret: string): Record<string, string> => ({
  STRIPE_SECRET_KEY: 'sk_test_fake',
  STRIPE_WEBHOOK_SECRET: webhookSecret,
  STRIPE_API_BASE: fake.url,
  STRIPE_PRICE_PRO: PRO_PRICE_TEST,
});
