import { z } from 'zod';
import { pageFields } from '../http/pagination.js';
import { ACCOUNT_AUDIT_ACTIONS, ACTOR_TYPES, ORG_AUDIT_ACTIONS } from './actions.js';

// Request and answer shapes of the audit log routes (./routes.ts; src/openapi/audit.ts; CONTRACT §11).

const unixSeconds = z
  .string()
  .regex(/^\d{1,12}$/, 'must be Unix seconds')
  .transform(Number);

const filterFields = {
  actor_id: z
    .string()
    .min(1)
    .max(100)
    .optional()
    .meta({ description: 'only events by this actor (usr_…, sa_…)' }),
  since: unixSeconds.optional().meta({ description: 'Unix seconds: events at or after it' }),
  until: unixSeconds.optional().meta({ description: 'Unix seconds: events before it' }),
};

export const orgAuditQuery = z.object({
  ...pageFields,
  ...filterFields,
  action: z.enum(ORG_AUDIT_ACTIONS).optional(),
});

export const accountAuditQuery = z.object({
  ...pageFields,
  ...filterFields,
  action: z.enum(ACCOUNT_AUDIT_ACTIONS).optional(),
});

/** The export routes take the same filters, and no page. */
export const orgExportQuery = orgAuditQuery.omit({ limit: true, offset: true, starting_after: true });
export const accountExportQuery = accountAuditQuery.omit({ limit: true, offset: true, starting_after: true });

export const auditEventAnswer = z
  .object({
    id: z.string().meta({ example: 'ae_4c2m8x0q7z1k5n3b6v9d1f8gh' }),
    created_at: z.number().int(),
    action: z.enum([...ORG_AUDIT_ACTIONS, ...ACCOUNT_AUDIT_ACTIONS]),
    actor: z.object({
      type: z.enum(ACTOR_TYPES),
      id: z.string().nullable(),
      email: z.string().optional(),
    }),
    credential_id: z
      .string()
      .nullable()
      .meta({ description: "the svc_ token's id, or the session's public handle (ses_…), that made it" }),
    ip: z.string().nullable(),
    user_agent: z.string().nullable(),
    target: z.object({ type: z.string(), id: z.string().nullable() }),
    details: z.record(z.string(), z.unknown()),
    prev_hash: z
      .string()
      .meta({ description: "the hash of the chain's previous event (64 zeros for the first)" }),
    hash: z
      .string()
      .meta({ description: "hex SHA-256 of this event's JSON without `hash`, RFC 8785 canonical form" }),
  })
  .meta({ id: 'AuditEvent' });

export const auditListAnswer = z.object({ data: z.array(auditEventAnswer), has_more: z.boolean() });

export const auditVerifyAnswer = z
  .object({ valid: z.boolean(), events: z.number().int(), first_invalid_id: z.string().nullable() })
  .meta({ id: 'AuditChainVerification' });
