import { index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { orgs } from './orgs.js';

// Responses API answers kept with `store` (docs/models.md "POST /v1/responses"): read
// back by GET /v1/responses/{id}, continued by `previous_response_id`, and removed by DELETE — each only
// within the organization that made it (every read names `org_id`). Kept in svc, never at the provider
// (chat refuses `store: true` for that reason). Rows expire after STORED_RESPONSE_TTL_DAYS; an expired
// row is never read, and the org's next stored response deletes its expired rows.
export const storedResponses = pgTable(
  'stored_responses',
  {
    /** `resp_…`, random; its output items' ids carry it (`msg_…`/`fc_…` = prefix + this id's tail + index). */
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => orgs.id),
    userId: text('user_id').notNull(),
    /** The conversation as chat messages, this response's output included (instructions are not carried). */
    messages: jsonb('messages').notNull(),
    /** The Response object as it was answered. */
    response: jsonb('response').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  },
  (t) => [index('stored_responses_org_expiry_idx').on(t.orgId, t.expiresAt)],
);
