import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../../../db/client.js';
import type { ChatMessage } from '../../upstream/types.js';
import type { ResponseObject } from './translate.js';

// Stored responses (table stored_responses). Every statement names the organization:
// a response is never read, continued or deleted from another one (an id of another org is simply not
// found). Kept STORED_RESPONSE_TTL_DAYS, as OpenAI keeps stored responses 30 days by default.

export const STORED_RESPONSE_TTL_DAYS = 30;

export interface StoredResponse {
  messages: ChatMessage[];
  response: ResponseObject;
}

/** The org's response `id`, unless it expired. */
export async function loadStored(db: Db, orgKey: string, id: string): Promise<StoredResponse | null> {
  const [row] = await queryRows<{ messages: ChatMessage[]; response: ResponseObject }>(
    db,
    sql`select messages, response from stored_responses
        where id = ${id} and org_id = ${orgKey} and expires_at > now()`,
  );
  return row ?? null;
}

/** Keeps a response, and deletes the org's expired ones in the same statement. */
export async function saveStored(
  db: Db,
  s: { id: string; orgKey: string; userId: string; messages: ChatMessage[]; response: ResponseObject },
): Promise<void> {
  await queryRows(
    db,
    sql`with expired as (
          delete from stored_responses where org_id = ${s.orgKey} and expires_at <= now()
        )
        insert into stored_responses (id, org_id, user_id, messages, response, expires_at)
        values (${s.id}, ${s.orgKey}, ${s.userId}, ${JSON.stringify(s.messages)}::jsonb,
                ${JSON.stringify(s.response)}::jsonb,
                now() + make_interval(days => ${STORED_RESPONSE_TTL_DAYS}))`,
  );
}

/** Deletes the org's response `id`; false when it has none by that id. */
export async function deleteStored(db: Db, orgKey: string, id: string): Promise<boolean> {
  const rows = await queryRows<{ id: string }>(
    db,
    sql`delete from stored_responses where id = ${id} and org_id = ${orgKey} and expires_at > now()
        returning id`,
  );
  return rows.length > 0;
}
