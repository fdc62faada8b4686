import { sql } from 'drizzle-orm';
import { boolean, index, jsonb, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { users } from './accounts.js';
import { orgs } from './orgs.js';

// The authorization server's state (CONTRACT §7). Every secret here is an HMAC (codes, refresh tokens,
// client secrets) or AES-GCM ciphertext (the private signing keys, which must be read back).

/** ES256 signing keys. The newest unretired key signs; the JWKS lists it and the one before (rotation). */
export const oauthSigningKeys = pgTable('oauth_signing_keys', {
  kid: text('kid').primaryKey(),
  /** The private JWK, AES-256-GCM sealed with the server encryption key. */
  privateJwkEnc: text('private_jwk_enc').notNull(),
  publicJwk: jsonb('public_jwk').$type<Record<string, unknown>>().notNull(),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  retiredAt: timestamp('retired_at', { withTimezone: true }),
});

/**
 * Registered clients (RFC 7591) and cached client ID metadata documents. `source` says where a client
 * came from, which the consent page shows: 'registered' (DCR), 'metadata' (an https client_id URL).
 */
export const oauthClients = pgTable('oauth_clients', {
  clientId: text('client_id').primaryKey(),
  source: text('source', { enum: ['registered', 'metadata'] }).notNull(),
  clientName: text('client_name'),
  clientUri: text('client_uri'),
  redirectUris: jsonb('redirect_uris').$type<string[]>().notNull(),
  grantTypes: jsonb('grant_types').$type<string[]>().notNull(),
  tokenEndpointAuthMethod: text('token_endpoint_auth_method').notNull(),
  /** HMAC of the client secret; null for public clients. */
  clientSecretHash: text('client_secret_hash'),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  /** Metadata documents: when the document was last fetched (the cache is refreshed after a TTL). */
  fetchedAt: timestamp('fetched_at', { withTimezone: true }),
});

export const OAUTH_RESOURCES = ['platform', 'model'] as const;
export type OAuthResource = (typeof OAUTH_RESOURCES)[number];

/** One row per approved resource: the unit a user or a removal revokes (CONTRACT §7 "each grant is its own"). */
export const oauthGrants = pgTable(
  'oauth_grants',
  {
    id: text('id').primaryKey(), // grt_…
    clientId: text('client_id').notNull(),
    userId: text('user_id')
      .notNull()
      .references(() => users.id),
    /** Stored org key (the `org` claim spells it org_…). */
    org: text('org')
      .notNull()
      .references(() => orgs.id),
    resource: text('resource', { enum: OAUTH_RESOURCES }).notNull(),
    scope: text('scope').notNull(),
    /** The origin whose issuer granted it: refreshes must come back to the same issuer. */
    issuer: text('issuer').notNull(),
    /**
     * The organization boundary (CONTRACT §7): false = the grant acts only in `org`; true = in every
     * live membership of the user (svc-cli always; another client when the person ticked "all my
     * organizations" on the consent or device page).
     */
    allOrgs: boolean('all_orgs').notNull().default(false),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
  },
  (t) => [
    index('oauth_grants_org_user_live_idx')
      .on(t.org, t.userId)
      .where(sql`${t.revokedAt} is null`),
  ],
);

/** Authorization codes: 60 s, single use; `grantIds` remembers what a code issued so a replay revokes it. */
export const oauthCodes = pgTable('oauth_codes', {
  codeHash: text('code_hash').primaryKey(),
  clientId: text('client_id').notNull(),
  userId: text('user_id')
    .notNull()
    .references(() => users.id),
  org: text('org')
    .notNull()
    .references(() => orgs.id),
  redirectUri: text('redirect_uri').notNull(),
  codeChallenge: text('code_challenge').notNull(),
  resources: jsonb('resources').$type<OAuthResource[]>().notNull(),
  issuer: text('issuer').notNull(),
  /** "All my organizations" was ticked on the consent page (oauthGrants.allOrgs). */
  allOrgs: boolean('all_orgs').notNull().default(false),
  /** What the approval grants, one scope per resource (`platform:read` for a read-only platform grant). */
  scope: text('scope'),
  expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  usedAt: timestamp('used_at', { withTimezone: true }),
  grantIds: jsonb('grant_ids').$type<string[]>(),
});

/**
 * Refresh tokens, one family per grant. A row is rotated once (`rotatedAt`); its successor is derived
 * from it, so two parallel refreshes inside the grace window get the same successor instead of one
 * of them tripping reuse detection (oauth/refresh.ts).
 */
export const oauthRefreshTokens = pgTable(
  'oauth_refresh_tokens',
  {
    tokenHash: text('token_hash').primaryKey(),
    grantId: text('grant_id')
      .notNull()
      .references(() => oauthGrants.id),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    rotatedAt: timestamp('rotated_at', { withTimezone: true }),
  },
  (t) => [index('oauth_refresh_tokens_grant_idx').on(t.grantId)],
);
