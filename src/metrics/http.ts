import type { IncomingMessage } from 'node:http';
import { httpDuration, httpRequests } from './registry.js';

// Per-request metrics, recorded by the request log once the answer is done (src/http/request-log.ts).
// The route label is the template Express matched (/v1/clients/:client_id), never the raw path: ids in
// paths would make one time series per client. A request no route matched is "unmatched".

type LoggedRequest = IncomingMessage & { originalUrl?: string; route?: { path?: unknown } };

function routeLabel(req: LoggedRequest): string {
  const path = req.route?.path;
  if (typeof path === 'string') return path;
  // The chat call's own entry (src/models/entry.ts) never enters Express (no originalUrl) and takes
  // exactly one path, without a query string: its URL is its template.
  if (req.originalUrl === undefined && req.url) return req.url;
  return 'unmatched';
}

export function recordRequest(req: LoggedRequest, status: number, milliseconds: number): void {
  const labels = { route: routeLabel(req), method: req.method ?? 'GET', status: String(status) };
  httpRequests.inc(labels);
  httpDuration.observe(labels, milliseconds / 1000);
}
