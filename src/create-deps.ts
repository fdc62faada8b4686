import type { Config } from './config.js';
import type { Database } from './db/client.js';
import type { Logger } from './log.js';
import type { Deps } from './deps.js';
import { loadKeys } from './crypto/server-secrets.js';
import { mailerFor } from './mail/mailer.js';
import { createSigningKeys } from '../oauth/keys.js';
import { revokeMemberGrants } from '../oauth/grants.js';
import { createLimits } from './ratelimit/limits.js';
import {
  announceDeletedOrg,
  createBilling,
  createLiveCalls,
  grantTrial,
  reclaimDeletedOrg,
} from './billing/hooks.js';
import { createModelServices } from './models/services.js';
import { startBalanceAlerts } from './billing/balance-alerts.js';
import { startEventDelivery } from './events/delivery.js';
import { startAutoTopups } from './billing/auto-topup.js';
import { devEvents } from './billing/dev-events.js';
import { startTokenExpirySweep } from './audit/token-expiry.js';

// The composition root: builds the Deps (src/deps.ts) once, for src/main.ts and for the test harness
// (test/helpers/server.ts) alike, so tests run the real wiring. It may import any domain; nothing but
// the entry points imports it (docs/architecture.md).

export async function createDeps(config: Config, database: Database, log: Logger): Promise<Deps> {
  const closers: (() => Promise<void> | void)[] = [];
  const keys = await loadKeys(database.db, config.sessionSecret, config.keyEncryptionKey);
  const mailer = mailerFor(config, database.db);
  const onClose = (fn: () => Promise<void> | void) => void closers.push(fn);
  const limits = createLimits({ config, database, hmacKey: keys.hmac, log, onClose });
  const signingKeys = createSigningKeys(database.db, keys.encryption);
  const models = createModelServices(config, database.db, signingKeys, log, keys.hmac, {
    // Only a database server can have peers (an embedded PGlite belongs to one process): no self-fencing.
    fence: database.kind === 'postgres',
  });
  // Settles the last run could not write (its spool): replayed in the background, exactly once each.
  models.settles.replaySpool();
  onClose(() => models.close());
  // Before the server listens: a client deleted from now on has its calls here ended (CONTRACT §8).
  const liveCalls = await createLiveCalls(database, log);
  // Alerts on balance crossings, and the delivery of outbound events, in every process.
  startBalanceAlerts({ db: database.db, mailer, portalUrl: config.v2Url, log, onClose });
  startEventDelivery({
    db: database.db,
    encryptionKey: keys.encryption,
    devMode: config.devMode,
    retryBaseMs: config.webhookRetryBaseMs,
    log,
    onClose,
  });
  // Each credential whose expires_at passes gets its token.expired audit event (CONTRACT §11).
  startTokenExpirySweep({ db: database.db, log, onClose });
  const deps: Deps = {
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
      // The reclaim, then the notice that ends the client's calls in every process once this commits.
      orgDeleted: [reclaimDeletedOrg, announceDeletedOrg],
      memberRemoved: [revokeMemberGrants],
    },
    billing: createBilling({ config, db: database.db, keys, log, liveCalls, onClose }),
    models,
    lifecycle: { draining: false },
    onClose: (fn) => void closers.push(fn),
    async close() {
      for (const fn of closers.reverse()) await fn();
    },
  };
  // Auto top-up's worker; the dev processor's charges arrive as its signed events.
  startAutoTopups(deps, deps.billing.processor?.kind === 'dev' ? devEvents(deps).deliver : undefined);
  return deps;
}
