import type { Config } from './config.js';
import type { Database, Db } from './db/client.js';
import type { Logger } from './log.js';
import { loadKeys, type Keys } from './crypto/server-secrets.js';
import { createOutboxMailer, createSmtpMailer, type Mailer } from './mail/mailer.js';
import type { OnAccountCreated } from './accounts/service.js';
import { createSigningKeys, type SigningKeys } from '../oauth/keys.js';
import { revokeMemberGrants } from '../oauth/grants.js';
import { createLimits, type Limits } from './ratelimit/limits.js';
import { createBilling, grantTrial, reclaimDeletedOrg, type Billing } from './billing/hooks.js';
import { createModelServices, type ModelServices } from './models/services.js';

// Everything a router or service needs, built once by the composition root (src/main.ts) or by the
// test harness (test/helpers/server.ts) — the same function, so tests run the real wiring.

export interface Hooks {
  accountCreated: OnAccountCreated[];
  orgDeleted: ((tx: Db, org: { orgKey: string; ownerId: string }) => Promise<void>)[];
  memberRemoved: ((tx: Db, membership: { orgKey: string; userId: string }) => Promise<void>)[];
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
   * its own in createDeps): billing grants the trial at registration and reclaims a deleted client's
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

export async function createDeps(config: Config, database: Database, log: Logger): Promise<Deps> {
  const closers: (() => Promise<void> | void)[] = [];
  const keys = await loadKeys(database.db, config.sessionSecret, config.keyEncryptionKey);
  const mailer = config.smtpUrl
    ? createSmtpMailer(config.smtpUrl, config.mailFrom)
    : createOutboxMailer(database.db);
  const onClose = (fn: () => Promise<void> | void) => void closers.push(fn);
  const limits = createLimits({ config, database, hmacKey: keys.hmac, log, onClose });
  const signingKeys = createSigningKeys(database.db, keys.encryption);
  const models = createModelServices(config, database.db, signingKeys, log, keys.hmac);
  // Settles the last run could not write (its spool): replayed in the background, exactly once each.
  models.settles.replaySpool();
  onClose(() => models.close());
  return {
    config,
    database,
    db: database.db,
    keys,
    log,
    mailer,
    signingKeys,
    limits,
    hooks: {
      accountCreated: [grantTrial],
      orgDeleted: [reclaimDeletedOrg],
      memberRemoved: [revokeMemberGrants],
    },
    billing: createBilling({ config, db: database.db, keys, log, onClose }),
    models,
    lifecycle: { draining: false },
    onClose: (fn) => void closers.push(fn),
    async close() {
      for (const fn of closers.reverse()) await fn();
    },
  };
}
