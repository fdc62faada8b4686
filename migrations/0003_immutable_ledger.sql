-- Ledger rows are immutable ("one immutable row per movement"): a correction is a new row, never
-- an edit. The application never updates or deletes them (src/billing/ledger.ts is their only writer);
-- this makes the database refuse it too, whoever asks.
CREATE OR REPLACE FUNCTION billing_entries_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'billing_entries rows are immutable (% refused)', TG_OP USING ERRCODE = 'restrict_violation';
END;
$$;
--> statement-breakpoint
CREATE TRIGGER billing_entries_no_update_delete BEFORE UPDATE OR DELETE ON billing_entries
  FOR EACH ROW EXECUTE FUNCTION billing_entries_immutable();
--> statement-breakpoint
CREATE TRIGGER billing_entries_no_truncate BEFORE TRUNCATE ON billing_entries
  FOR EACH STATEMENT EXECUTE FUNCTION billing_entries_immutable();
