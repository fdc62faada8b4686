import type { OrgRow, UserRow } from './users.js';
import { clientIdOf, unix } from '../ids.js';

// Output shapes of the account routes (CONTRACT §4). Built field by field so that hashes, ciphertexts
// and steps never leave by accident (STYLE: zod shapes every output; here the shape is explicit).

export interface UserView {
  id: string;
  email: string;
  name: string;
  email_verified: boolean;
  two_factor_enabled: boolean;
  created_at: number;
}

export const userView = (u: UserRow): UserView => ({
  id: u.id,
  email: u.email,
  name: u.name,
  email_verified: u.emailVerifiedAt !== null,
  two_factor_enabled: u.totpEnabledAt !== null,
  created_at: unix(u.createdAt),
});

/** The default client of a new account: the creator is its owner (interface document: Client). */
export const ownedClientView = (o: OrgRow) => ({
  id: clientIdOf(o.id),
  name: o.name,
  role: 'owner' as const,
  owner_id: o.ownerId,
  created_at: unix(o.createdAt),
});
