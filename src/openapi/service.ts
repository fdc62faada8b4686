import { z } from 'zod';
import { mailQuery } from '../dev/routes.js';
import { route, type Method } from './describe.js';

// Health, the document itself, and the development-only routes (/dev/*: 404 unless DEV_MODE).

const status = z.object({ status: z.enum(['ok']) });

const devPage = (method: Method, path: string, summary: string) =>
  route(method, path, {
    summary,
    surface: 'page',
    response:
      method === 'get' ? 'html' : { '303': { description: 'Done: back to the page or the return URL' } },
    errors: [404],
  });

export const serviceRoutes = [
  route('get', '/healthz', { summary: 'Liveness: the process accepts requests', response: status }),
  route('get', '/readyz', {
    summary: 'Readiness: the database answers',
    response: status,
    extra: {
      '503': {
        description: 'The database does not answer',
        content: { 'application/json': { schema: z.object({ status: z.literal('unavailable') }) } },
      },
    },
  }),
  route('get', '/openapi.json', {
    summary: 'This document (OpenAPI 3.1), with this origin as its server',
    response: z.looseObject({ openapi: z.string() }),
  }),
  route('get', '/docs', {
    summary: 'The rendered API reference (Swagger UI)',
    surface: 'page',
    response: 'html',
  }),
  route('get', '/docs/cli', {
    summary: 'The terminal client’s guide (docs/cli.md) as plain text; `svc --help` points here',
    response: {
      '200': { description: 'Markdown as text', content: { 'text/plain': { schema: z.string() } } },
    },
    errors: [404],
  }),
  route('get', '/docs/init.js', {
    summary: 'The script that starts the reference page',
    response: {
      '200': { description: 'JavaScript', content: { 'text/javascript': { schema: z.string() } } },
    },
  }),
  route('get', '/docs/docs.css', {
    summary: "The reference page's colours over Swagger UI's (WCAG AA contrast)",
    response: {
      '200': { description: 'CSS', content: { 'text/css': { schema: z.string() } } },
    },
  }),

  route('get', '/metrics', {
    summary: 'Prometheus metrics (a bearer of METRICS_TOKEN; 404 when it is not set)',
    auth: ['metricsToken'],
    response: {
      '200': {
        description: 'The Prometheus text exposition format',
        content: { 'text/plain': { schema: z.string() } },
      },
    },
    errors: [404],
  }),
  route('get', '/dev/mail', {
    summary: 'The development mail outbox for one address, newest first',
    query: mailQuery,
    response: z.object({
      data: z.array(
        z.object({
          to: z.string(),
          subject: z.string(),
          text: z.string(),
          html: z.string(),
          created_at: z.number().int(),
        }),
      ),
    }),
    errors: [404],
  }),
  devPage('get', '/dev/checkout/:session_id', 'Development payment processor: a checkout page'),
  devPage('post', '/dev/checkout/:session_id', 'Development payment processor: pay or fail a checkout'),
  devPage('get', '/dev/portal/:customer_id', 'Development payment processor: the billing portal'),
  devPage('post', '/dev/portal/:customer_id', 'Development payment processor: a portal action'),
  devPage('get', '/dev/invoices/:invoice_id', 'Development payment processor: an invoice'),
  devPage('post', '/dev/invoices/:invoice_id/refund', 'Development payment processor: refund an invoice'),
  devPage('post', '/dev/invoices/:invoice_id/dispute', 'Development payment processor: dispute an invoice'),
];
