import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { queryRows, type Db } from '../db/client.js';
import { decrypt, encrypt } from '../crypto/hash.js';
import { notFound, errorOf, COMMON_ERRORS } from '../http/errors.js';
import { isForbiddenAddress, literalAddress } from '../http/outbound-guard.js';
import { integerCursor, unknownCursor, type Page } from '../http/pagination.js';
import { clientIdOf, newId, unixOfStored } from '../ids.js';
import {
  MAX_ENDPOINTS_PER_CLIENT,
  type createdEndpointAnswer,
  type deliveryAnswer,
  type endpointAnswer,
  type endpointBody,
} from './schema.js';
import type { EventType } from './types.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { transaction } from '../db/transaction.js';
import { EVENT_ERRORS } from './errors.js';

// An organization's webhook endpoints and their delivery log. The routes check that the
// caller owns the organization; every query here is scoped by it, so an endpoint of another organization
// answers exactly like one that does not exist (STYLE: a row in another tenant).

type Endpoint = z.infer<typeof endpointAnswer>;

interface EndpointRow {
  id: string;
  org_key: string;
  url: string;
  events: string[];
  created_at: Date | string;
}

const toEndpoint = (r: EndpointRow): Endpoint => ({
  id: r.id,
  client_id: clientIdOf(r.org_key),
  url: r.url,
  events: r.events as EventType[],
  created_at: unixOfStored(r.created_at),
});

const badUrl = (message: string) =>
  errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', `url: ${message}`, {
    errors: [{ path: 'url', message }],
    param: 'url',
  });

/**
 * The URL rules besides its syntax: https outside DEV_MODE; no credentials or fragment; an address literal
 * of a private, loopback or other special range only in DEV_MODE. A name is checked when svc connects
 * (src/http/outbound-guard.ts), every time, so a name that resolves there later is refused too.
 */
function checkUrl(raw: string, devMode: boolean): void {
  const url = new URL(raw);
  if (url.protocol !== 'https:' && !devMode) throw badUrl('must be https');
  if (url.username || url.password) throw badUrl('must not carry a user name or password');
  if (url.hash) throw badUrl('must not have a fragment');
  const literal = literalAddress(url);
  if (!devMode && literal && isForbiddenAddress(literal))
    throw badUrl('must not be a private, loopback or otherwise special address');
}

export async function listEndpoints(db: Db, orgKey: string): Promise<{ data: Endpoint[] }> {
  const rows = await queryRows<EndpointRow>(
    db,
    sql`select id, org_key, url, events, created_at from webhook_endpoints
        where org_key = ${orgKey} order by created_at desc, id desc`,
  );
  return { data: rows.map(toEndpoint) };
}

/**
 * Registers an endpoint; the answer carries its signing secret this once. The secret is kept sealed with
 * the server's encryption key (server secrets), since svc must read it back to sign.
 */
export async function createEndpoint(
  db: Db,
  encryptionKey: Buffer,
  devMode: boolean,
  orgKey: string,
  body: z.infer<typeof endpointBody>,
  origin: AuditOrigin,
  /** The billing page's session: it may see the secret once more, on its next GET (revealSecret). */
  revealTo: string | null = null,
): Promise<z.infer<typeof createdEndpointAnswer>> {
  checkUrl(body.url, devMode);
  const secret = `whsec_${randomBytes(32).toString('base64url')}`;
  const id = newId('we');
  return transaction(db, async (t) => {
    // The organization's endpoints are counted under a lock on its first one's key: two creations
    // racing for the last place serialise (an advisory lock of the transaction, keyed by the org).
    await t.execute(sql`select pg_advisory_xact_lock(hashtext(${`webhook_endpoints:${orgKey}`}))`);
    const [count] = await queryRows<{ n: unknown }>(
      t,
      sql`select count(*) as n from webhook_endpoints where org_key = ${orgKey}`,
    );
    if (Number(count?.n) >= MAX_ENDPOINTS_PER_CLIENT)
      throw errorOf(
        EVENT_ERRORS,
        'TOO_MANY_ENDPOINTS',
        `a client has at most ${MAX_ENDPOINTS_PER_CLIENT} webhook endpoints`,
      );
    const [row] = await queryRows<EndpointRow>(
      t,
      sql`insert into webhook_endpoints (id, org_key, url, events, secret_sealed, reveal_session, reveal_until)
          values (${id}, ${orgKey}, ${body.url}, ${sql.param(body.events)}::text[], ${encrypt(encryptionKey, secret)},
                  ${revealTo}, ${revealTo === null ? null : sql`now() + make_interval(secs => ${REVEAL_SECONDS})`})
          returning id, org_key, url, events, created_at`,
    );
    await recordAuditEvent(t, endpointEvent('webhook_endpoint.created', orgKey, row!, origin));
    return { ...toEndpoint(row!), secret };
  });
}

/** How long the page that created an endpoint has to show its secret (the redirect's GET comes at once). */
export const REVEAL_SECONDS = 600;

/**
 * The secret of an endpoint this page session created, once (STYLE: single-use things are redeemed with
 * one guarded UPDATE … RETURNING; whoever gets no row lost). Null when there is none to show: already
 * shown, too late, another session's, or another organization's.
 */
export async function revealSecret(
  db: Db,
  encryptionKey: Buffer,
  orgKey: string,
  sessionId: string,
): Promise<{ id: string; url: string; events: string[]; secret: string } | null> {
  const [row] = await queryRows<{ id: string; url: string; events: string[]; secret_sealed: string }>(
    db,
    sql`update webhook_endpoints set reveal_session = null, reveal_until = null
        where id = (select id from webhook_endpoints
                    where org_key = ${orgKey} and reveal_session = ${sessionId} and reveal_until > now()
                    order by created_at desc limit 1)
          and reveal_session = ${sessionId}
        returning id, url, events, secret_sealed`,
  );
  if (!row) return null;
  return { id: row.id, url: row.url, events: row.events, secret: decrypt(encryptionKey, row.secret_sealed) };
}

const endpointNotFound = () => notFound('no such webhook endpoint');

/** Deletes an endpoint and its pending deliveries (its log goes with it). */
export async function deleteEndpoint(
  db: Db,
  orgKey: string,
  endpointId: string,
  origin: AuditOrigin,
): Promise<{ deleted: true }> {
  await transaction(db, async (tx) => {
    const [row] = await queryRows<{ id: string; url: string; events: string[] }>(
      tx,
      sql`delete from webhook_endpoints where id = ${endpointId} and org_key = ${orgKey} returning id, url, events`,
    );
    if (!row) throw endpointNotFound();
    await recordAuditEvent(tx, endpointEvent('webhook_endpoint.deleted', orgKey, row, origin));
  });
  return { deleted: true };
}

/** An endpoint's audit event (CONTRACT §11): its id, address and events, never its signing secret. */
const endpointEvent = (
  action: 'webhook_endpoint.created' | 'webhook_endpoint.deleted',
  orgKey: string,
  endpoint: { id: string; url: string; events: string[] },
  origin: AuditOrigin,
) => ({
  orgKey,
  action,
  target: { type: 'webhook_endpoint', id: endpoint.id },
  details: { url: endpoint.url, events: endpoint.events },
  origin,
});

interface DeliveryRow {
  id: unknown;
  endpoint_id: string;
  event_id: string;
  type: string;
  status: 'pending' | 'delivered' | 'failed';
  attempts: unknown;
  last_status: unknown;
  last_error: string | null;
  next_attempt_at: Date | string;
  delivered_at: Date | string | null;
  created_at: Date | string;
}

/** An endpoint's delivery log, newest first (CONTRACT §3 paging, `starting_after` a delivery id). */
export async function listDeliveries(
  db: Db,
  orgKey: string,
  endpointId: string,
  page: Page,
): Promise<{ data: z.infer<typeof deliveryAnswer>[] }> {
  const [endpoint] = await queryRows<{ id: string }>(
    db,
    sql`select id from webhook_endpoints where id = ${endpointId} and org_key = ${orgKey}`,
  );
  if (!endpoint) throw endpointNotFound();
  let after = sql``;
  if (page.startingAfter !== undefined) {
    const id = integerCursor(page.startingAfter);
    const [c] = await queryRows<{ id: unknown }>(
      db,
      sql`select id from webhook_deliveries where id = ${id} and endpoint_id = ${endpointId}`,
    );
    if (!c) throw unknownCursor();
    after = sql`and -d.id > ${-id}`;
  }
  const rows = await queryRows<DeliveryRow>(
    db,
    sql`select d.id, d.endpoint_id, d.event_id, e.type, d.status, d.attempts, d.last_status, d.last_error,
               d.next_attempt_at, d.delivered_at, d.created_at
        from webhook_deliveries d join outbound_events e on e.id = d.event_id
        where d.endpoint_id = ${endpointId} ${after}
        order by -d.id limit ${page.limit} offset ${page.offset}`,
  );
  return {
    data: rows.map((r) => ({
      id: Number(r.id),
      endpoint_id: r.endpoint_id,
      event_id: r.event_id,
      event_type: r.type as EventType,
      status: r.status,
      attempts: Number(r.attempts),
      last_status_code: r.last_status === null ? null : Number(r.last_status),
      last_error: r.last_error,
      next_attempt_at: r.status === 'pending' ? unixOfStored(r.next_attempt_at) : null,
      delivered_at: unixOfStored(r.delivered_at),
      created_at: unixOfStored(r.created_at),
    })),
  };
}
