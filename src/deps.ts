import type { Config } from './config.js';
import type { Database, Db } from './db/client.js';
import type { Logger } from './log.js';
import type { Keys } from './crypto/server-secrets.js';
import type { Mailer } from './mail/mailer.js';
import type { OnAccountCreated } from './accounts/users.js';
import type { SigningKeys } from '../oauth/keys.js';
import type { Limits } from './ratelimit/limits.js';
import type { Billing } from './billing/hooks.js';
import type { ModelServices } from './models/services.js';
import type { AuditOrigin } from './audit/context.js';

// Everything a router or service needs: the shape only. Every domain imports this type, so it imports
// no domain code, only types; the values are built once by createDeps (src/create-deps.ts), the
// composition root that src/main.ts and the test harness (test/helpers/server.ts) share.

export interface Hooks {
  accountCreated: OnAccountCreated[];
  orgDeleted: ((tx: Db, org: { orgKey: string; ownerId: string }) => Promise<void>)[];
  memberRemoved: ((
    tx: Db,
    membership: { orgKey: string; userId: string; origin: AuditOrigin },
  ) => Promise<void>)[];
}

export interface Deps {
  config: Config;
  database: Database;
  db: Db;
  keys: Keys;
  log: Logger;
  mailer: Mailer;
  /** ES256 keys of OAuth access tokens and signed outcome headers, persisted and rotatable (oauth/keys.ts). */
  signingKeys: SigningKeys;
  /** Rate limits of CONTRACT §1 (src/ratelimit/limits.ts). */
  limits: Limits;
  /**
   * Cross-domain effects that must happen in the same transaction as the event (each domain registers
   * its own in createDeps, src/create-deps.ts): billing grants the trial at registration and reclaims a deleted client's
   * allocation; OAuth revokes a removed member's grants (CONTRACT §5, §8).
   */
  hooks: Hooks;
  /** Payments (Stripe or the dev processor) and the hold sweep (src/billing/hooks.ts). */
  billing: Billing;
  /** The model upstream (or svc-local), the concurrency limiter, the agent catalog (src/models/services.ts). */
  models: ModelServices;
  /** Whether the process is draining for shutdown (src/server.ts): /readyz answers 503 meanwhile. */
  lifecycle: { draining: boolean };
  /** Called in reverse order on shutdown (timers, pools, sockets a domain opened). */
  onClose(fn: () => Promise<void> | void): void;
  close(): Promise<void>;
}
