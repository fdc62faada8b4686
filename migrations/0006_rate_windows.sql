-- RPM and TPM as rolling minutes (CONTRACT §11 "Rate limits"; docs/decisions/0065-rolling-rate-windows.md;
-- src/ratelimit/rolling-window-postgres.ts). A window is the log of what was admitted under one key
-- (`rpm:org:<org>`, `tpm:token:<id>`, …): one row per admitted call, stamped with the database's clock,
-- counting `amount` (1 for a request, the hold's most for tokens, corrected to the real count at settle).
-- What a key has used is the sum of its rows younger than the window: no bucket boundary, so no burst at
-- a boundary can pass twice the limit. That sum is kept beside the log, in rate_window_totals, changed in
-- the statement that changes the log (an admission, a correction, a row leaving the window), so an
-- admission reads one number instead of adding up the key's minute.
--
-- Admissions and corrections commit without waiting for the WAL flush (synchronous_commit off for their
-- own transaction): every call of a key queues behind the key's lock, which a flush of a few
-- milliseconds would hold for as long as the calls' spacing. A database that crashes loses at most the
-- last few hundred milliseconds of entries: for a minute, the windows count fewer calls than were made.
-- Money is never written here; holds and settles keep their synchronous commits.
--
-- Rows that left the window are deleted by the key's next admission; a deleted row stays in the index
-- until a vacuum removes it, so at 200 calls a second a key's index range starts with thousands of them.
-- An admission reads only what left the window since the key's last one (`swept_to`, where that one
-- stopped) and never walks those: its cost does not grow with the rows deleted since the last vacuum.
--
-- The functions that admit, correct and sweep: src/db/custom/window-batches.sql.
CREATE TABLE IF NOT EXISTS rate_window_entries (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  key text NOT NULL,
  at timestamptz NOT NULL,
  amount integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS rate_window_entries_key_at ON rate_window_entries (key, at);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS rate_window_totals (
  key text PRIMARY KEY,
  used bigint NOT NULL,
  -- Every row of the key at or before this time has been deleted, its amount taken off `used`.
  swept_to timestamptz
);
--> statement-breakpoint

-- The periodic scan for limits (src/ratelimit/model-limits.ts, every 5 s in every process) reads only the
-- organizations and credentials that have a limit: these partial indexes hold exactly those rows, so the
-- scan's cost follows the number of limits set, not the number of credentials ever minted.
CREATE INDEX IF NOT EXISTS api_tokens_limited ON api_tokens (id)
  WHERE revoked_at IS NULL AND (rpm_limit IS NOT NULL OR tpm_limit IS NOT NULL);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS orgs_limited ON orgs (id)
  WHERE deleted_at IS NULL AND (rpm_limit IS NOT NULL OR tpm_limit IS NOT NULL);
