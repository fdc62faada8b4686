import { z } from 'zod';
import {
  accountAuditQuery,
  accountExportQuery,
  auditListAnswer,
  auditVerifyAnswer,
  orgAuditQuery,
  orgExportQuery,
} from '../audit/schema.js';
import { CSV_COLUMNS } from '../audit/export.js';
import { route } from './describe.js';

// The audit log (CONTRACT §11; docs/audit.md): an organization's log (owner) and a person's own.

const clientParams = z.object({ client_id: z.string().meta({ example: 'client_k3j9x2' }) });
const both = ['session', 'token'] as const;

const exportResponse = (what: string) => ({
  '200': {
    description: `${what}: CSV (columns ${CSV_COLUMNS.join(', ')}; details as JSON) or JSONL (one event a line, as the API answers it), newest first`,
    content: {
      'text/csv': { schema: z.string() },
      'application/x-ndjson': { schema: z.string().meta({ description: 'one AuditEvent per line' }) },
    },
  },
});

const verifyDescription =
  'Recomputes the chain from its first event: each prev_hash must be the previous hash (64 zeros first) and each hash the hex SHA-256 of the event without hash in RFC 8785 form. first_invalid_id names the first event that does not hold.';

export const auditRoutes = [
  route('get', '/v1/clients/:client_id/audit-events', {
    summary: "An organization's audit log, newest first (owner)",
    description:
      'Every change of who may do what or spend what in the organization, one event each, written in the transaction of the change. since is inclusive, until exclusive (Unix seconds).',
    auth: [...both],
    params: clientParams,
    query: orgAuditQuery,
    response: auditListAnswer,
    errors: [403],
  }),
  route('get', '/v1/clients/:client_id/audit-events/verify', {
    summary: "Verify an organization's audit chain (owner)",
    description: verifyDescription,
    auth: [...both],
    params: clientParams,
    response: auditVerifyAnswer,
    errors: [403],
  }),
  route('get', '/v1/clients/:client_id/audit-events.csv', {
    summary: "Export an organization's audit log as CSV (owner; the list's filters)",
    auth: [...both],
    params: clientParams,
    query: orgExportQuery,
    response: exportResponse('The events'),
    errors: [403],
  }),
  route('get', '/v1/clients/:client_id/audit-events.jsonl', {
    summary: "Export an organization's audit log as JSONL (owner; the list's filters)",
    auth: [...both],
    params: clientParams,
    query: orgExportQuery,
    response: exportResponse('The events'),
    errors: [403],
  }),
  route('get', '/v1/account/audit-events', {
    summary: "The caller's own account log: sign-ins, password, 2FA, sessions, deletion",
    auth: ['session'],
    query: accountAuditQuery,
    response: auditListAnswer,
  }),
  route('get', '/v1/account/audit-events/verify', {
    summary: "Verify the caller's own account chain",
    description: verifyDescription,
    auth: ['session'],
    response: auditVerifyAnswer,
  }),
  route('get', '/v1/account/audit-events.csv', {
    summary: "Export the caller's own account log as CSV",
    auth: ['session'],
    query: accountExportQuery,
    response: exportResponse('The events'),
  }),
  route('get', '/v1/account/audit-events.jsonl', {
    summary: "Export the caller's own account log as JSONL",
    auth: ['session'],
    query: accountExportQuery,
    response: exportResponse('The events'),
  }),
];
