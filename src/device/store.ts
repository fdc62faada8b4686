import { and, eq, gt, isNull, lt } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import type { Db } from '../db/client.js';
import { deviceCodes, type DeviceFlow } from '../db/schema.js';
import { errorOf } from '../http/errors.js';
import { hmacSecret } from '../crypto/hash.js';
import { resolveMemberOrg } from '../orgs/membership.js';
import { generateDeviceCode, generateUserCode, normaliseUserCode } from './user-code.js';
import { transaction } from '../db/transaction.js';
import { DEVICE_ERRORS } from './errors.js';

// The device-code core (RFC 8628; CONTRACT §6, §7). One store for the terminal flow
// (/v1/auth/device/*) and the OAuth device grant (/oauth/device_authorization): a user code from either
// is approved the same way. States: pending → approved | denied; approved → consumed, exactly once.

export const DEVICE_CODE_TTL_SECONDS = 600;
export const DEVICE_POLL_INTERVAL_SECONDS = 5;
/** RFC 8628 §3.5: each slow_down adds 5 s; capped so a misbehaving client is not locked out for the life. */
const SLOW_DOWN_STEP_SECONDS = 5;
const MAX_INTERVAL_SECONDS = 60;
/** Rows are kept a day past expiry (a late poll still answers expired_token from the row), then purged. */
const PURGE_AFTER_MS = 24 * 60 * 60 * 1000;

export type DeviceCodeRow = typeof deviceCodes.$inferSelect;

export interface DeviceAuthorization {
  deviceCode: string;
  /** As shown to the person: `XXXX-XXXX`. */
  userCode: string;
  expiresIn: number;
  interval: number;
}

export type PollResult =
  | { status: 'authorization_pending' }
  | { status: 'slow_down'; interval: number }
  | { status: 'access_denied' }
  | { status: 'expired_token' }
  | { status: 'approved'; row: DeviceCodeRow };

/** A poll's outcome; on approval `issued` is what `onApproved` returned (undefined without one). */
export type PollOutcome<T = undefined> =
  Exclude<PollResult, { status: 'approved' }> | { status: 'approved'; row: DeviceCodeRow; issued: T };

/** Wrong user codes per user: ten in 10 min → 429 (CONTRACT §6; policy in src/ratelimit/limits.ts). */
const userCodeLimiter = (deps: Deps) => deps.limits.userCodeFailures;

const hashUserCode = (deps: Deps, normalised: string) =>
  hmacSecret(deps.keys.hmac, `user_code:${normalised}`);
const hashDeviceCode = (deps: Deps, deviceCode: string) =>
  hmacSecret(deps.keys.hmac, `device_code:${deviceCode}`);

export async function createDeviceAuthorization(
  deps: Deps,
  input: { flow: DeviceFlow; oauthClientId?: string; resources?: string[]; scope?: string; issuer?: string },
): Promise<DeviceAuthorization> {
  const expiresAt = new Date(Date.now() + DEVICE_CODE_TTL_SECONDS * 1000);
  // Housekeeping on the write path, so no timer is needed: an index range scan over a day-old tail.
  await deps.db.delete(deviceCodes).where(lt(deviceCodes.expiresAt, new Date(Date.now() - PURGE_AFTER_MS)));
  // A user-code collision (unique index) is retried with a fresh pair; anything else is a real error.
  for (let attempt = 0; ; attempt++) {
    const deviceCode = generateDeviceCode();
    const userCode = generateUserCode();
    try {
      await deps.db.insert(deviceCodes).values({
        deviceCodeHash: hashDeviceCode(deps, deviceCode),
        userCodeHash: hashUserCode(deps, normaliseUserCode(userCode)!),
        flow: input.flow,
        oauthClientId: input.oauthClientId ?? null,
        resources: input.resources ?? null,
        scope: input.scope ?? null,
        issuer: input.issuer ?? null,
        intervalSeconds: DEVICE_POLL_INTERVAL_SECONDS,
        expiresAt,
      });
      return {
        deviceCode,
        userCode,
        expiresIn: DEVICE_CODE_TTL_SECONDS,
        interval: DEVICE_POLL_INTERVAL_SECONDS,
      };
    } catch (err) {
      if ((err as { code?: string }).code !== '23505' || attempt >= 4) throw err;
    }
  }
}

async function pendingByUserCode(deps: Deps, userCode: string): Promise<DeviceCodeRow | null> {
  const normalised = normaliseUserCode(userCode);
  if (!normalised) return null;
  let rows: DeviceCodeRow[];
  try {
    rows = await deps.db
      .select()
      .from(deviceCodes)
      .where(
        and(
          eq(deviceCodes.userCodeHash, hashUserCode(deps, normalised)),
          eq(deviceCodes.status, 'pending'),
          isNull(deviceCodes.consumedAt),
          gt(deviceCodes.expiresAt, new Date()),
        ),
      );
  } catch {
    // Fail closed like the membership guard (Authentication 6): the code can be neither approved nor
    // denied now, and an outage must not read as a wrong code (which would count against the person).
    throw deviceCodesUnavailable();
  }
  return rows[0] ?? null;
}

/** 503 DEVICE_CODES_UNAVAILABLE: the device-code store cannot be read or written now (fail closed). */
export const deviceCodesUnavailable = () =>
  errorOf(DEVICE_ERRORS, 'DEVICE_CODES_UNAVAILABLE', undefined, { headers: { 'Retry-After': '5' } });

/** 400 INVALID_USER_CODE, counted against the user (CONTRACT §6: ten wrong codes in 10 min → 429). */
async function wrongUserCode(deps: Deps, userId: string | undefined): Promise<never> {
  if (userId) await userCodeLimiter(deps).fail(userId);
  throw errorOf(
    DEVICE_ERRORS,
    'INVALID_USER_CODE',
    'this code is not valid or has expired; start again on the device',
  );
}

/**
 * The pending authorization a user code names (for the approval page: flow, OAuth client, resources),
 * or null. Pass `userId` when a signed-in person typed the code, so guesses count against the limit.
 */
export async function findByUserCode(
  deps: Deps,
  userCode: string,
  opts: { userId?: string } = {},
): Promise<DeviceCodeRow | null> {
  if (opts.userId) await userCodeLimiter(deps).check(opts.userId);
  const row = await pendingByUserCode(deps, userCode);
  if (!row && opts.userId) await userCodeLimiter(deps).fail(opts.userId);
  return row;
}

/**
 * Approves a pending user code for `orgKey` (a live membership of the user; the default org when
 * omitted). 403 NO_ACCESS for any other org, 503 when memberships cannot be established (Authentication 6),
 * 400 INVALID_USER_CODE for an unknown, expired or already decided code.
 */
export async function approveUserCode(
  deps: Deps,
  input: { userCode: string; userId: string; orgKey?: string; allOrgs?: boolean },
): Promise<{ orgKey: string; row: DeviceCodeRow }> {
  const limiter = userCodeLimiter(deps);
  await limiter.check(input.userId);
  const pending = await pendingByUserCode(deps, input.userCode);
  if (!pending) return wrongUserCode(deps, input.userId);

  const { orgKey } = await resolveMemberOrg(deps.db, input.userId, input.orgKey);
  // Guarded: a code decided meanwhile (another tab, a deny) is not overwritten.
  const [row] = await deps.db
    .update(deviceCodes)
    .set({
      status: 'approved',
      userId: input.userId,
      orgId: orgKey,
      // Meaningful for OAuth device grants of clients other than svc-cli (CONTRACT §7).
      allOrgs: input.allOrgs === true,
      decidedAt: new Date(),
    })
    .where(
      and(
        eq(deviceCodes.id, pending.id),
        eq(deviceCodes.status, 'pending'),
        gt(deviceCodes.expiresAt, new Date()),
      ),
    )
    .returning();
  if (!row) return wrongUserCode(deps, input.userId);
  return { orgKey, row };
}

/** Denies a pending user code; the device then polls access_denied (RFC 8628 §3.5). */
export async function denyUserCode(
  deps: Deps,
  input: { userCode: string; userId: string },
): Promise<DeviceCodeRow> {
  await userCodeLimiter(deps).check(input.userId);
  const pending = await pendingByUserCode(deps, input.userCode);
  if (!pending) return wrongUserCode(deps, input.userId);
  const [row] = await deps.db
    .update(deviceCodes)
    .set({ status: 'denied', userId: input.userId, decidedAt: new Date() })
    .where(and(eq(deviceCodes.id, pending.id), eq(deviceCodes.status, 'pending')))
    .returning();
  if (!row) return wrongUserCode(deps, input.userId);
  return row;
}

/**
 * One poll of a device code issued for `flow`. An approved code is consumed by a single guarded
 * UPDATE … WHERE consumed_at IS NULL AND status = 'approved' RETURNING: of two racing polls exactly one
 * gets the row; the other (and every later poll) sees expired_token (CONTRACT §6).
 *
 * `onApproved` runs inside the consuming transaction (the terminal flow mints its token there), so a
 * failure to issue the credential leaves the approval unconsumed for the next poll.
 */
export async function pollDeviceCode<T = undefined>(
  deps: Deps,
  deviceCode: string,
  flow: DeviceFlow,
  onApproved?: (tx: Db, row: DeviceCodeRow) => T | Promise<T>,
): Promise<PollOutcome<T>> {
  const hash = hashDeviceCode(deps, deviceCode);
  const now = new Date();

  const consumed = await transaction(deps.db, async (tx) => {
    const [row] = await tx
      .update(deviceCodes)
      .set({ consumedAt: now })
      .where(
        and(
          eq(deviceCodes.deviceCodeHash, hash),
          eq(deviceCodes.flow, flow),
          eq(deviceCodes.status, 'approved'),
          isNull(deviceCodes.consumedAt),
          gt(deviceCodes.expiresAt, now),
        ),
      )
      .returning();
    if (!row) return null;
    const issued = onApproved ? await onApproved(tx, row) : (undefined as T);
    return { row, issued };
  });
  if (consumed) return { status: 'approved', ...consumed };

  // Not handed out: record the poll and decide between pending, slow_down, denied and expired. The row
  // is locked while the previous poll time is read and replaced, so two concurrent polls serialise.
  return transaction(deps.db, async (tx): Promise<PollOutcome<T>> => {
    const [row] = await tx
      .select()
      .from(deviceCodes)
      .where(and(eq(deviceCodes.deviceCodeHash, hash), eq(deviceCodes.flow, flow)))
      .for('update');
    if (!row || row.consumedAt || row.expiresAt <= now) return { status: 'expired_token' };
    if (row.status === 'denied') return { status: 'access_denied' };
    // Approved but not consumed above: approval landed between the two statements; the next poll gets it.
    const tooFast =
      row.status === 'pending' &&
      row.lastPolledAt !== null &&
      now.getTime() - row.lastPolledAt.getTime() < row.intervalSeconds * 1000;
    const interval = tooFast
      ? Math.min(row.intervalSeconds + SLOW_DOWN_STEP_SECONDS, MAX_INTERVAL_SECONDS)
      : row.intervalSeconds;
    await tx
      .update(deviceCodes)
      .set({ lastPolledAt: now, intervalSeconds: interval })
      .where(eq(deviceCodes.id, row.id));
    return tooFast ? { status: 'slow_down', interval } : { status: 'authorization_pending' };
  });
}
