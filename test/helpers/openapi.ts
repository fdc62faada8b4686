import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Express } from 'express';

// What the app mounts (Express's router stack, walked) and how to check a real answer against the
// OpenAPI document with a maintained validator (@hyperjump/json-schema, OpenAPI 3.1 dialect).

export interface MountedRoute {
  method: string; // lower case; '_all' for router.all
  path: string; // Express form, /v1/clients/:client_id
}

interface Layer {
  route?: { path: unknown; methods: Record<string, boolean> };
  handle?: { stack?: Layer[] };
  slash?: boolean;
}

/** Every route of the app, from its router stack (routers mounted at the root, as src/app.ts mounts them). */
export function mountedRoutes(app: Express): MountedRoute[] {
  const out: MountedRoute[] = [];
  const walk = (stack: Layer[]) => {
    for (const layer of stack) {
      if (layer.route) {
        if (typeof layer.route.path !== 'string')
          throw new Error(`a route path that is not a string: ${String(layer.route.path)}`);
        for (const method of Object.keys(layer.route.methods)) out.push({ method, path: layer.route.path });
      } else if (layer.handle?.stack) {
        // A router mounted under a prefix would hide the prefix from this walk: refuse rather than guess.
        if (!layer.slash)
          throw new Error('a router mounted under a path prefix: teach mountedRoutes its prefix');
        walk(layer.handle.stack);
      }
    }
  };
  walk((app as unknown as { router: { stack: Layer[] } }).router.stack);
  return out;
}

/** Writes the document where the validator can load it by URL; returns a function to validate answers. */
export async function documentValidator(document: unknown) {
  const { validate } = await import('@hyperjump/json-schema/openapi-3-1');
  const dir = mkdtempSync(join(tmpdir(), 'svc-openapi-'));
  const file = join(dir, 'svc.openapi.json');
  writeFileSync(file, JSON.stringify(document));
  const base = pathToFileURL(file).href;
  // A JSON Pointer in a URI fragment (RFC 6901 §6): escaped, then percent-encoded ({client_id} has braces).
  const pointer = (s: string) => encodeURIComponent(s.replaceAll('~', '~0').replaceAll('/', '~1'));
  return {
    /** Validates the document itself against the OpenAPI 3.1 schema (with its schema dialect). */
    async validateDocument() {
      return validate('https://spec.openapis.org/oas/3.1/schema-base', document as never);
    },
    /** Validates `body` against the schema of `status` answers of `method path` (OpenAPI path template). */
    async validateResponse(
      method: string,
      path: string,
      status: number,
      body: unknown,
      type = 'application/json',
    ) {
      const responses = (document as { paths: Record<string, Record<string, { responses: object }>> }).paths[
        path
      ]?.[method]?.responses as Record<string, { content?: Record<string, unknown> }> | undefined;
      if (!responses?.[String(status)]?.content?.[type]) {
        return {
          valid: false,
          undocumented: `${method} ${path} answers ${status} ${type}, which the document does not describe`,
        };
      }
      const at = `${base}#/paths/${pointer(path)}/${method}/responses/${status}/content/${pointer(type)}/schema`;
      return validate(at, body as never);
    },
  };
}
