import type { z } from 'zod';
import type { client, user } from '../../src/openapi/accounts.js';

// Named shapes of the service's JSON answers that tests read field by field, for the typed generic of
// helpers/http.ts (`api.get<Page<ClientRow>>(…)`). Where src/openapi exports the response schema the
// type is inferred from it; the rest copy the schema of the route in src/openapi (named beside each) —
// test/openapi-responses.test.ts checks real answers against those schemas.

/** A list answer (`{ data: [...] }`, pagination fields aside). */
export interface Page<T> {
  data: T[];
}

export type UserRow = z.infer<typeof user>;
/** One entry of GET /v1/clients. */
export type ClientRow = z.infer<typeof client>;

/** POST /v1/clients (src/openapi/accounts.ts). */
export interface CreatedClient {
  id: string;
  name: string;
  owner_id: string;
  created_at: number;
}

/** POST /v1/auth/device/code (src/openapi/accounts.ts; RFC 8628 §3.2). */
export interface DeviceCode {
  device_code: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete: string;
  expires_in: number;
  interval: number;
}

/** POST /v1/auth/device/poll: one of complete, authorization_pending, slow_down (flattened). */
export interface DevicePoll {
  status: string;
  token?: string;
  client_id?: string;
  email?: string;
  interval?: number;
}

/** One message of GET /dev/mail (src/openapi/service.ts). */
export interface DevMail {
  to: string;
  subject: string;
  text: string;
  html: string;
  created_at: number;
}
