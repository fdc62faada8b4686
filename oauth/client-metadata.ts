import { eq } from 'drizzle-orm';
import { fetch } from 'undici';
import { z } from 'zod';
import type { Deps } from '../src/deps.js';
import { oauthClients } from '../src/db/schema.js';
import { guardedAgent, isForbiddenAddress, isLoopback, literalAddress } from '../src/http/outbound-guard.js';
import { redirectUriProblem } from './redirect-uris.js';
import type { OAuthClient } from './client-record.js';

/** The guard moved below both fetchers (src/http/outbound-guard.ts); named here too for its tests. */
export { isForbiddenAddress };

// Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document; MCP authorization
// 2025-11-25 "Client ID Metadata Documents"): the client_id is an https URL and the document it serves
// is the client's registration. Fetching a URL a stranger chose is an SSRF risk, so: https only
// (http://localhost… in DEV_MODE), every resolved address checked against private, loopback, link-local
// and other special ranges at connect time (so DNS rebinding cannot slip past a pre-check), no
// redirects, 5 s, 64 KiB; documents are cached for 10 minutes.
//
// Fetching on demand is work a stranger can ask for, so besides the per-address limit
// on the /oauth/* routes that can fetch (oauth/fetch-limit.ts): a URL that failed is not fetched again
// for FAILURE_TTL_MS, concurrent requests for one URL share one fetch, and at most MAX_CONCURRENT_FETCHES
// run at once in a process (beyond that the client is unknown for now, not queued).

const FETCH_TIMEOUT_MS = 5_000;
const MAX_DOCUMENT_BYTES = 64 * 1024;
const CACHE_TTL_MS = 10 * 60 * 1000;
export const FAILURE_TTL_MS = 5 * 60 * 1000;
const MAX_REMEMBERED_FAILURES = 10_000;
const MAX_CONCURRENT_FETCHES = 16;

/** URL → when its failure is forgotten. Insertion order is age order, so the oldest goes first. */
const failures = new Map<string, number>();
const inFlight = new Map<string, Promise<OAuthClient | null>>();
let joined = 0;

/** How many requests found their URL's fetch under way and shared it, in this process so far. */
export const sharedFetches = (): number => joined;

function failedRecently(url: string): boolean {
  const until = failures.get(url);
  if (until === undefined) return false;
  if (until > Date.now()) return true;
  failures.delete(url);
  return false;
}

function rememberFailure(url: string): void {
  failures.delete(url);
  failures.set(url, Date.now() + FAILURE_TTL_MS);
  if (failures.size > MAX_REMEMBERED_FAILURES) failures.delete(failures.keys().next().value!);
}
const DEV_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

/** True when `clientId` is meant as a metadata document URL (else it is a registered client id). */
export function isMetadataDocumentUrl(clientId: string, devMode: boolean): boolean {
  // Asked of every token request's client_id (oauth/fetch-limit.ts), nearly always `svc-cli` or a
  // registered id: URL.canParse says no without the TypeError `new URL` throws, whose stack trace cost
  // more than the rest of the check (docs/oauth.md, What a refresh costs).
  if (!URL.canParse(clientId)) return false;
  const url = new URL(clientId);
  if (url.protocol === 'https:') return true;
  return devMode && url.protocol === 'http:' && DEV_HOSTS.has(url.hostname);
}

const documentSchema = z.object({
  client_id: z.string(),
  client_name: z.string().max(200).optional(),
  client_uri: z.url().optional(),
  // The same rule as dynamic registration (CONTRACT §7): javascript: or http:// to any host were
  // accepted here and redirected to.
  redirect_uris: z
    .array(
      z
        .string()
        .max(2000)
        .refine((uri) => redirectUriProblem(uri) === null, 'redirect URI not allowed'),
    )
    .min(1)
    .max(20),
  grant_types: z.array(z.string()).optional(),
  response_types: z.array(z.string()).optional(),
  token_endpoint_auth_method: z.enum(['none']).optional(),
  // A document is public: it must not carry a shared secret (draft §4.1).
  client_secret: z.undefined().optional(),
  client_secret_expires_at: z.undefined().optional(),
});

async function readLimited(body: ReadableStream<Uint8Array> | null): Promise<string | null> {
  if (!body) return null;
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    size += chunk.byteLength;
    if (size > MAX_DOCUMENT_BYTES) return null;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

async function download(url: string, devMode: boolean): Promise<unknown> {
  const parsed = new URL(url);
  const dev = devMode && parsed.protocol === 'http:' && DEV_HOSTS.has(parsed.hostname);
  const literal = literalAddress(parsed);
  if (!dev && literal && isForbiddenAddress(literal)) return null;
  const dispatcher = guardedAgent({
    connectTimeoutMs: FETCH_TIMEOUT_MS,
    allow: dev ? isLoopback : undefined,
  });
  try {
    const res = await fetch(url, {
      dispatcher,
      redirect: 'error',
      signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
      headers: { accept: 'application/json', 'accept-encoding': 'identity' },
    });
    if (res.status !== 200) return null;
    const text = await readLimited(res.body as ReadableStream<Uint8Array> | null);
    return text === null ? null : JSON.parse(text);
  } catch {
    return null;
  } finally {
    void dispatcher.close();
  }
}

/** The client a metadata document describes, from the cache or freshly fetched; null when invalid. */
export async function fetchClientMetadataDocument(deps: Deps, url: string): Promise<OAuthClient | null> {
  if (url.length > 2000 || new URL(url).hash) return null;
  const [cached] = await deps.db.select().from(oauthClients).where(eq(oauthClients.clientId, url));
  if (
    cached &&
    cached.source === 'metadata' &&
    cached.fetchedAt &&
    Date.now() - cached.fetchedAt.getTime() < CACHE_TTL_MS
  ) {
    return { ...cached, source: 'metadata' };
  }
  if (failedRecently(url)) return null;
  const pending = inFlight.get(url);
  if (pending) {
    joined++;
    return pending;
  }
  if (inFlight.size >= MAX_CONCURRENT_FETCHES) return null;
  const fetching = fetchAndStore(deps, url).finally(() => inFlight.delete(url));
  inFlight.set(url, fetching);
  return fetching;
}

async function fetchAndStore(deps: Deps, url: string): Promise<OAuthClient | null> {
  const raw = await download(url, deps.config.devMode);
  const doc = documentSchema.safeParse(raw);
  // The document must name itself: a document served at one URL cannot speak for another client_id.
  if (!doc.success || doc.data.client_id !== url) {
    rememberFailure(url);
    return null;
  }
  const values = {
    clientId: url,
    source: 'metadata' as const,
    clientName: doc.data.client_name ?? null,
    clientUri: doc.data.client_uri ?? null,
    redirectUris: doc.data.redirect_uris,
    grantTypes: doc.data.grant_types ?? ['authorization_code', 'refresh_token'],
    tokenEndpointAuthMethod: 'none',
    clientSecretHash: null,
    fetchedAt: new Date(),
  };
  await deps.db
    .insert(oauthClients)
    .values(values)
    .onConflictDoUpdate({ target: oauthClients.clientId, set: { ...values, clientId: undefined } });
  return { ...values };
}
