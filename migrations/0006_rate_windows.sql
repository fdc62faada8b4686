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

-- Admits one call against every window it counts in, all or none. Input i counts p_amounts[i] against
-- key p_keys[i] whose limit is p_limits[i]. The keys' advisory locks are taken in one order (sorted), so
-- two calls of one organization in two processes are decided one after the other, each seeing what the
-- other admitted (in READ COMMITTED every statement below reads the newest committed rows), and two
-- callers never wait on each other in a cycle.
--
-- One row per input: `used`, what the window holds after this call (before it when refused); `reset_ms`,
-- until the window is empty (its newest row leaves); `retry_ms`, until this input's amount fits (0: it
-- fits now; null: never, the amount is above the limit). The call is admitted when every input fits; then
-- `entry_id` is its row.
-- The keys are distinct (an organization's and a credential's, one of each metric).
CREATE OR REPLACE FUNCTION svc_rate_admit(p_keys text[], p_limits integer[], p_amounts integer[],
  p_window_ms integer)
RETURNS TABLE (ord integer, used bigint, reset_ms integer, retry_ms integer, entry_id bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_now timestamptz;
  v_since timestamptz;
  v_window interval := make_interval(secs => p_window_ms / 1000.0);
  v_n integer := coalesce(array_length(p_keys, 1), 0);
  v_used bigint[] := '{}';
  v_gone bigint[] := '{}';
  v_reset integer[] := '{}';
  v_retry integer[] := '{}';
  v_ids bigint[] := '{}';
  v_fits boolean := true;
  v_freed bigint;
  v_sum bigint;
  v_newest timestamptz;
  v_row record;
  i integer;
BEGIN
  -- The keys' locks and the totals' rows are held until the commit, and the next call of the key waits
  -- for them: it must not wait for the commit's WAL flush too (see the note on durability above).
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM pg_advisory_xact_lock(hashtextextended('svc_rate:' || s.k, 0))
     FROM (SELECT DISTINCT k FROM unnest(p_keys) k ORDER BY 1) s;
  v_now := clock_timestamp();
  v_since := v_now - v_window;
  FOR i IN 1 .. v_n LOOP
    -- The key's total, what left the window since its last admission (deleted here; the total is
    -- written once, below) and its newest row. The statement's snapshot still shows the rows it
    -- deletes, so a newest row at or before v_since means none is left.
    WITH total AS (
      SELECT t.used, t.swept_to FROM rate_window_totals t WHERE t.key = p_keys[i]
    ), gone AS (
      DELETE FROM rate_window_entries e
       WHERE e.key = p_keys[i] AND e.at > coalesce((SELECT total.swept_to FROM total), '-infinity')
         AND e.at <= v_since
      RETURNING e.amount
    )
    SELECT coalesce((SELECT total.used FROM total), 0), (SELECT coalesce(sum(gone.amount), 0) FROM gone),
           (SELECT max(e.at) FROM rate_window_entries e WHERE e.key = p_keys[i])
      INTO v_sum, v_freed, v_newest;
    IF v_newest <= v_since THEN
      v_newest := NULL;
    END IF;
    v_gone[i] := v_freed;
    v_sum := v_sum - v_freed;
    IF v_newest IS NULL AND v_sum <> 0 THEN
      -- An empty log holds nothing, whatever a total left behind says (the log emptied without it).
      UPDATE rate_window_totals t SET used = 0, swept_to = v_since WHERE t.key = p_keys[i];
      v_gone[i] := 0;
      v_sum := 0;
    END IF;
    v_used[i] := v_sum;
    v_reset[i] := CASE WHEN v_newest IS NULL THEN 0
      ELSE greatest(0, ceil(extract(epoch FROM (v_newest + v_window - v_now)) * 1000))::integer END;
    IF p_amounts[i] > p_limits[i] THEN
      v_retry[i] := NULL;
      v_fits := false;
    ELSIF v_used[i] + p_amounts[i] <= p_limits[i] THEN
      v_retry[i] := 0;
    ELSE
      -- The oldest rows leave first: the call fits once enough of them have left.
      v_fits := false;
      v_freed := 0;
      FOR v_row IN SELECT e.at, e.amount FROM rate_window_entries e
                    WHERE e.key = p_keys[i] AND e.at > v_since ORDER BY e.at, e.id
      LOOP
        v_freed := v_freed + v_row.amount;
        IF v_used[i] - v_freed + p_amounts[i] <= p_limits[i] THEN
          v_retry[i] := greatest(1, ceil(extract(epoch FROM (v_row.at + v_window - v_now)) * 1000))::integer;
          EXIT;
        END IF;
      END LOOP;
    END IF;
  END LOOP;
  IF v_fits THEN
    -- One row per key in every window, its ids in the keys' order (inserted in that order), and each
    -- total less what left and plus the call.
    WITH added AS (
      INSERT INTO rate_window_entries (key, at, amount)
        SELECT k.key, v_now, k.amount FROM unnest(p_keys, p_amounts) WITH ORDINALITY AS k(key, amount, n)
         ORDER BY k.n
      RETURNING id
    ), counted AS (
      INSERT INTO rate_window_totals AS t (key, used, swept_to)
        SELECT k.key, k.amount, v_since FROM unnest(p_keys, p_amounts) AS k(key, amount)
      ON CONFLICT (key) DO UPDATE
        SET used = t.used - v_gone[array_position(p_keys, excluded.key)] + excluded.used,
            swept_to = excluded.swept_to
    )
    SELECT array_agg(added.id ORDER BY added.id) INTO v_ids FROM added;
    FOR i IN 1 .. v_n LOOP
      v_used[i] := v_used[i] + p_amounts[i];
      v_reset[i] := p_window_ms;
    END LOOP;
  ELSE
    UPDATE rate_window_totals t SET used = t.used - g.gone, swept_to = v_since
      FROM unnest(p_keys, v_gone) AS g(key, gone) WHERE t.key = g.key;
  END IF;
  RETURN QUERY SELECT g.i, v_used[g.i], v_reset[g.i], v_retry[g.i], v_ids[g.i]
    FROM generate_series(1, v_n) AS g(i);
END;
$$;
--> statement-breakpoint

-- An admitted entry's amount set to what its call really used, and its key's total with it; nothing when
-- the entry has left the window. The entry's row lock orders it with the admission or sweep that deletes
-- the row, so the total never counts an amount that is not in the log, or misses one that is. PL/pgSQL
-- rather than SQL so the statement is planned once per connection, not on every call.
CREATE OR REPLACE FUNCTION svc_rate_correct(p_id bigint, p_amount integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  WITH old AS (
    SELECT e.id, e.key, e.amount FROM rate_window_entries e WHERE e.id = p_id FOR UPDATE
  ), changed AS (
    UPDATE rate_window_entries e SET amount = p_amount FROM old WHERE e.id = old.id
      RETURNING old.key, p_amount - old.amount AS delta
  )
  UPDATE rate_window_totals t SET used = t.used + c.delta FROM changed c WHERE t.key = c.key;
END;
$$;
--> statement-breakpoint

-- Rows whose keys no admission comes back to, with their totals; rows an admission is deleting are
-- skipped (it subtracts them itself), so the two never wait on each other.
CREATE OR REPLACE FUNCTION svc_rate_sweep(p_window_ms integer) RETURNS void
LANGUAGE sql AS $$
  WITH gone AS (
    DELETE FROM rate_window_entries e WHERE e.id IN (
      SELECT x.id FROM rate_window_entries x
        WHERE x.at <= clock_timestamp() - make_interval(secs => p_window_ms / 1000.0)
        FOR UPDATE SKIP LOCKED)
    RETURNING e.key, e.amount
  )
  UPDATE rate_window_totals t SET used = t.used - g.amount
    FROM (SELECT gone.key, sum(gone.amount) AS amount FROM gone GROUP BY gone.key) g WHERE t.key = g.key;
$$;
--> statement-breakpoint

-- The periodic scan for limits (src/ratelimit/model-limits.ts, every 5 s in every process) reads only the
-- organizations and credentials that have a limit: these partial indexes hold exactly those rows, so the
-- scan's cost follows the number of limits set, not the number of credentials ever minted.
CREATE INDEX IF NOT EXISTS api_tokens_limited ON api_tokens (id)
  WHERE revoked_at IS NULL AND (rpm_limit IS NOT NULL OR tpm_limit IS NOT NULL);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS orgs_limited ON orgs (id)
  WHERE deleted_at IS NULL AND (rpm_limit IS NOT NULL OR tpm_limit IS NOT NULL);
