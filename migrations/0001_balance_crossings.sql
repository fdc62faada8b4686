-- Balance crossings (src/billing/balance-crossings.ts, src/db/tables/balance-watches.ts).
-- A crossing of a watched threshold T is the balance of an org account going from ≥ T to < T. It is
-- recorded by a trigger on the balance's own UPDATE, so in the very transaction that moved the balance,
-- whichever path moved it (a batch of settles, an expired hold's settle, an allocation lowered, a refund
-- taken back): rows of one account are updated one transaction at a time, so each sees the balance the
-- previous one left, and a crossing is recorded once however many calls and processes settle together.
-- A top-up that lifts the balance back to T or above re-arms it: the next fall below T is a new crossing.
--
-- Cost on the model path: the WHEN clause below, two width_bucket calls over the account's own row
-- (NULL, so false, when nothing is watched); only a crossing runs the function and writes a row. The
-- trigger takes no lock beyond the row the update already holds, so no lock order changes.

-- The account row's copy of its org's thresholds, ascending (width_bucket needs them sorted), or null.
CREATE OR REPLACE FUNCTION svc_sync_watch_thresholds() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  k text;
BEGIN
  FOREACH k IN ARRAY ARRAY[CASE WHEN TG_OP <> 'INSERT' THEN OLD.org_key END, CASE WHEN TG_OP <> 'DELETE' THEN NEW.org_key END] LOOP
    CONTINUE WHEN k IS NULL;
    UPDATE billing_accounts a SET watch_thresholds = (
        SELECT array_agg(DISTINCT w.threshold ORDER BY w.threshold) FROM balance_watches w WHERE w.org_key = k)
      WHERE a.id = 'org:' || k;
  END LOOP;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER balance_watches_sync AFTER INSERT OR UPDATE OR DELETE ON balance_watches
  FOR EACH ROW EXECUTE FUNCTION svc_sync_watch_thresholds();
--> statement-breakpoint

-- One row per watch whose threshold lies in (new balance, old balance].
CREATE OR REPLACE FUNCTION svc_record_balance_crossings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO balance_crossings (org_key, purpose, threshold, balance_before, balance_after)
    SELECT w.org_key, w.purpose, w.threshold, OLD.balance, NEW.balance
    FROM balance_watches w
    WHERE w.org_key = NEW.org_key AND w.threshold <= OLD.balance AND w.threshold > NEW.balance
    ORDER BY w.threshold DESC, w.purpose;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
-- width_bucket(b, thresholds) counts the thresholds ≤ b: fewer after the update means one was crossed.
CREATE TRIGGER billing_accounts_balance_crossing AFTER UPDATE OF balance ON billing_accounts
  FOR EACH ROW
  WHEN (width_bucket(NEW.balance, NEW.watch_thresholds) < width_bucket(OLD.balance, NEW.watch_thresholds))
  EXECUTE FUNCTION svc_record_balance_crossings();
