import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { CHAT_PATH } from '../../src/models/front-ends/chat.js';
import { openApiDocument } from '../../src/openapi/document.js';
import { openApiPath } from '../../src/openapi/describe.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { documentValidator, mountedRoutes } from '../helpers/openapi.js';

// The OpenAPI document describes every route the app mounts, and nothing else (docs/openapi.md: a new
// route is one route(...) call in src/openapi/<surface>.ts). It is served on every origin with that
// origin as its server, validates as OpenAPI 3.1, and /docs renders it from this origin's own files.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

type Paths = Record<string, Record<string, unknown>>;
const documented = () => openApiDocument().paths as Paths;

describe('OpenAPI coverage', () => {
  it('every mounted route (and the chat call’s own entry) is described', () => {
    const mounted = [...mountedRoutes(buildApp(server.deps)), { method: 'post', path: CHAT_PATH }];
    expect(mounted.length).toBeGreaterThan(80);
    const paths = documented();
    const missing = mounted.filter(({ method, path }) => {
      const item = paths[openApiPath(path)];
      // router.all(path): described by the methods it serves (the others answer 405).
      return method === '_all' ? !item : !item?.[method];
    });
    expect(missing.map((r) => `${r.method.toUpperCase()} ${r.path}`)).toEqual([]);
  });

  it('every described route is mounted', () => {
    const mounted = new Set(
      [...mountedRoutes(buildApp(server.deps)), { method: 'post', path: CHAT_PATH }].map(
        (r) => `${r.method} ${openApiPath(r.path)}`,
      ),
    );
    const extra: string[] = [];
    for (const [path, item] of Object.entries(documented())) {
      for (const method of Object.keys(item))
        if (!mounted.has(`${method} ${path}`)) extra.push(`${method} ${path}`);
    }
    expect(extra).toEqual([]);
  });

  it('the document validates as OpenAPI 3.1', async () => {
    const res = await fetch(`${server.url}/openapi.json`);
    expect(res.status).toBe(200);
    const doc = (await res.json()) as {
      openapi: string;
      components: { securitySchemes: Record<string, unknown> };
    };
    const output = await (await documentValidator(doc)).validateDocument();
    expect(output).toEqual({ valid: true });
    // A schema that is not valid JSON Schema would pass the document check above only if unchecked:
    // the dialect check covers every Schema Object too (schema-base).
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.components.securitySchemes).sort()).toEqual([
      'metricsToken',
      'oauth',
      'sessionBearer',
      'sessionCookie',
      'svcToken',
    ]);
  });

  // The schema check above does not see what lies between the document's parts: a path template whose
  // `{param}` no parameter declares (or the reverse), a duplicated operationId, a dangling $ref. Each of
  // these passes it; @readme/openapi-parser checks them (and the schema again, with ajv).
  it('passes @readme/openapi-parser (path parameters, operationIds, $refs)', async () => {
    const { validate } = await import('@readme/openapi-parser');
    const doc = (await (await fetch(`${server.url}/openapi.json`)).json()) as Record<string, unknown>;
    const result = await validate(structuredClone(doc) as never);
    expect(result).toMatchObject({ valid: true, warnings: [], specification: 'OpenAPI' });
    // and it does see what the schema check misses: a path parameter dropped from one operation.
    const broken = structuredClone(doc) as {
      paths: Record<string, Record<string, { parameters?: unknown[] }>>;
    };
    broken.paths['/v1/clients/{client_id}/credits/balance']!.get!.parameters = [];
    expect(await (await documentValidator(broken)).validateDocument()).toEqual({ valid: true });
    const refused = await validate(broken as never);
    expect(refused.valid).toBe(false);
  });

  // Client generators name their methods after operationIds (src/openapi/describe.ts operationIdOf).
  it('every operation has an operationId of its own, made from its method and path', () => {
    const ids = Object.entries(documented()).flatMap(([path, item]) =>
      Object.entries(item).map(([method, op]) => ({
        path,
        method,
        id: (op as { operationId?: string }).operationId,
      })),
    );
    expect(ids.length).toBeGreaterThan(150);
    expect(ids.filter((o) => !o.id || !/^[a-z]+[A-Z0-9][A-Za-z0-9]*$/.test(o.id))).toEqual([]);
    expect(new Set(ids.map((o) => o.id)).size).toBe(ids.length);
    const budget = documented()['/v1/clients/{client_id}/budget'] as Record<string, { operationId?: string }>;
    expect(budget.get?.operationId).toBe('getV1ClientsByClientIdBudget');
  });

  it('is served on every origin, naming that origin as its server', async () => {
    for (const origin of [server.url, server.v2Url, server.lightUrl]) {
      const doc = (await (await fetch(`${origin}/openapi.json`)).json()) as { servers: unknown };
      expect(doc.servers).toEqual([{ url: origin }]);
    }
  });

  it('/docs is a page whose scripts and styles all come from this origin', async () => {
    const res = await fetch(`${server.url}/docs`);
    expect(res.status).toBe(200);
    const csp = res.headers.get('content-security-policy')!;
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    const page = await res.text();
    const assets = [...page.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(assets.length).toBeGreaterThanOrEqual(3);
    for (const asset of assets) {
      expect(asset.startsWith('/')).toBe(true);
      const a = await fetch(`${server.url}${asset}`);
      expect(a.status, asset).toBe(200);
      expect(a.headers.get('content-type')).toMatch(/javascript|css|image\/png/);
      await a.arrayBuffer();
    }
  });
});

// CONTRACT §1: outside DEV_MODE `/dev/*` answers 404, so the document served there does not list it.
describe('OpenAPI in production mode (DEV_MODE off)', () => {
  let production: TestServer;
  beforeAll(async () => {
    production = await startTestServer({ env: { DEV_MODE: 'false' } });
  });
  afterAll(async () => {
    await production?.close();
  });

  it('leaves out the /dev/* routes, which answer 404 there, and keeps every other route', async () => {
    const served = (await (await fetch(`${production.url}/openapi.json`)).json()) as { paths: Paths };
    const devPaths = Object.keys(served.paths).filter((p) => p.startsWith('/dev'));
    expect(devPaths).toEqual([]);
    expect((await fetch(`${production.url}/dev/mail?to=a@example.com`)).status).toBe(404);
    const everyOther = Object.keys(documented()).filter((p) => !p.startsWith('/dev'));
    expect(Object.keys(served.paths).sort()).toEqual(everyOther.sort());
    // DEV_MODE lists them (the development server's reference names its outbox and processor pages).
    const dev = (await (await fetch(`${server.url}/openapi.json`)).json()) as { paths: Paths };
    expect(Object.keys(dev.paths)).toContain('/dev/mail');
  });
});
