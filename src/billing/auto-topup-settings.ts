import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { transaction } from '../db/transaction.js';
import { clientIdOf } from '../ids.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { setBalanceWatch } from './balance-crossings.js';

// Auto top-up's settings (docs/billing.md, "Auto top-up"): the owner opts in per organization with a
// trigger balance, an amount and a monthly cap; svc turns it off after a declined charge. How a charge is
// made is ./auto-topup.ts.

export const WATCH_AUTO_TOPUP = 'auto_topup';

export interface AutoTopupSettings {
  trigger_credits: number;
  amount_usd: number;
  monthly_cap_usd: number;
}

export interface AutoTopupJson extends AutoTopupSettings {
  client_id: string;
  enabled: boolean;
  /** Why svc turned it off (a declined charge); null otherwise. */
  disabled_reason: string | null;
  /** Cents charged or being charged this UTC month (counted against the cap). */
  charged_this_month_usd: number;
}

/** Charges that count against the month's cap: all but the failed and the skipped. */
export const COUNTED_CHARGES = sql`status in ('pending', 'charging', 'charged', 'succeeded')`;
export const UTC_MONTH_START = sql`(date_trunc('month', now() at time zone 'UTC') at time zone 'UTC')`;

export async function getAutoTopup(db: Db, orgKey: string): Promise<AutoTopupJson | null> {
  const [row] = await queryRows<Record<string, unknown>>(
    db,
    sql`select a.*, (select coalesce(sum(c.amount_cents), 0) from auto_topup_charges c
                     where c.org_key = a.org_key and ${COUNTED_CHARGES}
                       and c.created_at >= ${UTC_MONTH_START}) as charged
        from auto_topups a where a.org_key = ${orgKey}`,
  );
  if (!row) return null;
  return {
    client_id: clientIdOf(orgKey),
    enabled: Boolean(row.enabled),
    trigger_credits: Number(row.trigger_credits),
    amount_usd: Number(row.amount_cents),
    monthly_cap_usd: Number(row.monthly_cap_cents),
    disabled_reason: (row.disabled_reason as string | null) ?? null,
    charged_this_month_usd: Number(row.charged),
  };
}

/** Opts in (or changes the settings): watches the balance for falls below the trigger. */
export async function setAutoTopup(
  db: Db,
  orgKey: string,
  s: AutoTopupSettings,
  origin: AuditOrigin,
): Promise<AutoTopupJson> {
  await transaction(db, async (tx) => {
    await tx.execute(
      sql`insert into auto_topups (org_key, enabled, trigger_credits, amount_cents, monthly_cap_cents)
          values (${orgKey}, true, ${s.trigger_credits}, ${s.amount_usd}, ${s.monthly_cap_usd})
          on conflict (org_key) do update set enabled = true, trigger_credits = excluded.trigger_credits,
            amount_cents = excluded.amount_cents, monthly_cap_cents = excluded.monthly_cap_cents,
            disabled_reason = null, updated_at = now()`,
    );
    await setBalanceWatch(tx, orgKey, WATCH_AUTO_TOPUP, s.trigger_credits);
    await recordAuditEvent(tx, autoTopupEvent(orgKey, origin, { enabled: true, ...s }));
  });
  return (await getAutoTopup(db, orgKey))!;
}

/** Opts out (the owner, or svc after a decline with its reason). */
export async function disableAutoTopup(
  db: Db,
  orgKey: string,
  reason: string | null,
  origin: AuditOrigin,
): Promise<void> {
  await transaction(db, async (tx) => {
    await tx.execute(
      sql`update auto_topups set enabled = false, disabled_reason = ${reason}, updated_at = now() where org_key = ${orgKey}`,
    );
    await setBalanceWatch(tx, orgKey, WATCH_AUTO_TOPUP, null);
    await recordAuditEvent(tx, autoTopupEvent(orgKey, origin, { enabled: false, disabled_reason: reason }));
  });
}

/** Auto top-up's audit event (CONTRACT §11 `auto_topup.set`): on with its settings, or off and why. */
const autoTopupEvent = (orgKey: string, origin: AuditOrigin, details: Record<string, unknown>) => ({
  orgKey,
  origin,
  action: 'auto_topup.set' as const,
  target: { type: 'client', id: clientIdOf(orgKey) },
  details,
});
