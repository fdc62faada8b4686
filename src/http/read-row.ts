import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestHandler } from 'express';
import type { EntryStep, FastEntry } from './entry-steps.js';

// A read served ahead of Express (decision 0136): a GET route's steps and its read, written once, from
// which its module mounts the Express route (every request to the path: a query string, a body, a
// conditional request, HEAD) and the route table takes a row that the node-level listener serves a plain
// GET with (no query string, no body, no conditional header), so that it walks none of Express's layers,
// body parsers included. Both ways run the same steps and the same read, and answer 200 with the same
// bytes and headers (Express's res.json: its content type, length and weak ETag); an error goes to the
// same error answer (src/http/error-middleware.ts). test/http/read-rows.test.ts checks both ways alike.

/** A request of a read, either way in: a `:name` path segment is req.params.name, a query string req.query. */
export type ReadRequest = IncomingMessage & { params?: Record<string, string>; query?: unknown };

export interface Read<Req extends ReadRequest> {
  path: string;
  /** Its steps (the credential's checks), as Express middleware is written. */
  steps: EntryStep<Req>[];
  /** The answer's JSON body; an error thrown is answered as Express's error middleware answers it. */
  read(req: Req): Promise<unknown>;
}

/** Only a GET with nothing Express's layers would act on takes the row; every other request, Express. */
export function isPlainRead(req: IncomingMessage): boolean {
  const { headers } = req;
  return (
    (headers['content-length'] === undefined || headers['content-length'] === '0') &&
    headers['transfer-encoding'] === undefined &&
    // A conditional GET can be a 304 (Express's req.fresh).
    headers['if-none-match'] === undefined &&
    headers['if-modified-since'] === undefined
  );
}

/** The read's row of the route table (src/app.ts). */
export function readRow<Req extends ReadRequest>(read: Read<Req>): FastEntry<Req> {
  return {
    method: 'GET',
    path: read.path,
    aheadOfExpress: true,
    accepts: isPlainRead,
    surface: 'detail',
    steps: read.steps,
    route: async (req, res) => sendRead(res, await read.read(req)),
  };
}

/** The read as an Express route's handlers: `router.get(read.path, ...expressRead(read))`. */
export function expressRead<Req extends ReadRequest>(read: Read<Req>): RequestHandler[] {
  const answer: RequestHandler = async (req, res) => {
    res.json(await read.read(req as unknown as Req));
  };
  return [...(read.steps as unknown as RequestHandler[]), answer];
}

/**
 * 200 with `body` as Express's res.json writes it on a GET: its content type, its length, and its weak ETag
 * (Express's default `etag` setting, worked out as the etag package does: the length in hex, then the
 * body's SHA-1 in base64 cut to 27 characters).
 */
function sendRead(res: ServerResponse, body: unknown): void {
  const bytes = Buffer.from(JSON.stringify(body));
  const hash = createHash('sha1').update(bytes).digest('base64').substring(0, 27);
  res.statusCode = 200;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', bytes.length);
  res.setHeader('ETag', `W/"${bytes.length.toString(16)}-${hash}"`);
  res.end(bytes);
}
