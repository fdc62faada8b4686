-- The rolling windows' admissions, corrections and sweep (CONTRACT §11; the log and the totals, and why
-- these commit without waiting for the WAL flush: src/db/custom/rate-windows.sql). The calls in flight in
-- one process share one statement and one commit each way (src/ratelimit/rolling-window-postgres.ts groups
-- them, as the holds and settles are grouped: src/db/batch.ts; decision 0173), and a key's total row is
-- written once a batch.
--
-- First two steps the functions below share: a batch's locks, and its totals written; then the admissions,
-- the corrections and the sweep.

-- Begins an admission's or a correction's transaction: its commit does not wait for the WAL flush, and
-- the advisory locks of p_keys are taken, in one order (sorted), so two batches sharing a key in two
-- processes take turns and never wait on each other in a cycle. Returns the distinct keys, sorted.
CREATE OR REPLACE FUNCTION svc_rate_lock_keys(p_keys text[]) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
  v_keys text[] := ARRAY(SELECT DISTINCT x FROM unnest(p_keys) AS x ORDER BY 1);
BEGIN
  -- The keys' locks and the totals' rows are held until the commit, and the next call of a key waits
  -- for them: it must not wait for the commit's WAL flush too (rate-windows.sql, on durability).
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM pg_advisory_xact_lock(hashtextextended('svc_rate:' || x, 0)) FROM unnest(v_keys) AS x;
  RETURN v_keys;
END;
$$;
--> statement-breakpoint

-- Adds p_deltas[i] to the total of key p_keys[i], each total once, in the order given (sorted by the
-- caller: the lock order below).
CREATE OR REPLACE FUNCTION svc_rate_add_to_totals(p_keys text[], p_deltas bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. coalesce(cardinality(p_keys), 0) LOOP
    UPDATE rate_window_totals t SET used = t.used + p_deltas[i] WHERE t.key = p_keys[i];
  END LOOP;
END;
$$;
--> statement-breakpoint

-- Admits calls, each against every window it counts in, all or none, in input order. Input j counts p_amounts[j] against key p_keys[j] whose limit is p_limits[j], for call p_calls[j]
-- (1, 2, …: a call's inputs are adjacent, its keys distinct). Every key's advisory lock is taken first
-- (svc_rate_lock_keys), so two batches sharing a key are decided one after the other, each seeing what the
-- other admitted (in READ COMMITTED every statement below reads the newest committed rows). The batch has
-- one clock: its calls are admitted at the same instant.
--
-- Lock order, as the corrections and the sweep below: advisory locks, then entry rows, then each total
-- row in key order. Every key's departed entries are deleted before any total is written, and each total
-- is written once, last.
--
-- One row per input: `used`, what the window holds after the call when admitted (before it when refused);
-- `reset_ms`, until the window is empty (its newest row leaves); `retry_ms`, until this input's amount fits
-- (0: it fits now; null: never, the amount is above the limit). A call is admitted when every input of it
-- fits; then `entry_id` is the input's row.
CREATE OR REPLACE FUNCTION svc_rate_admit_many(p_calls integer[], p_keys text[], p_limits integer[],
  p_amounts integer[], p_window_ms integer)
RETURNS TABLE (call integer, ord integer, used bigint, reset_ms integer, retry_ms integer, entry_id bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_now timestamptz;
  v_since timestamptz;
  v_window interval := make_interval(secs => p_window_ms / 1000.0);
  v_n integer := coalesce(array_length(p_keys, 1), 0);
  -- Per key of the batch, in sorted order: what its window holds as the batch goes, what left it here,
  -- what the batch adds, whether its log was empty, and its newest entry (null: none in the window).
  v_keys text[];
  v_used bigint[];
  v_gone bigint[];
  v_added bigint[];
  v_empty boolean[];
  v_newest timestamptz[];
  -- Per input: its key's place in v_keys, and its row.
  v_at integer[] := '{}';
  v_row_used bigint[] := '{}';
  v_reset integer[] := '{}';
  v_retry integer[] := '{}';
  v_fits boolean[] := '{}';
  v_ids bigint[];
  v_total bigint;
  v_swept timestamptz;
  v_freed bigint;
  v_call_fits boolean;
  v_first integer;
  v_last integer;
  v_entry record;
  k integer;
  j integer;
  i integer;
BEGIN
  v_keys := svc_rate_lock_keys(p_keys);
  v_now := clock_timestamp();
  v_since := v_now - v_window;
  v_used := array_fill(0::bigint, ARRAY[cardinality(v_keys)]);
  v_gone := v_used;
  v_added := v_used;
  v_empty := array_fill(false, ARRAY[cardinality(v_keys)]);
  v_newest := array_fill(NULL::timestamptz, ARRAY[cardinality(v_keys)]);

  -- Each key: its total, what left the window since its last admission (deleted here), its newest row.
  FOR k IN 1 .. cardinality(v_keys) LOOP
    SELECT t.used, t.swept_to INTO v_total, v_swept FROM rate_window_totals t WHERE t.key = v_keys[k];
    WITH gone AS (
      DELETE FROM rate_window_entries e
       WHERE e.key = v_keys[k] AND e.at > coalesce(v_swept, '-infinity') AND e.at <= v_since
      RETURNING e.amount
    )
    SELECT coalesce(sum(gone.amount), 0) INTO v_freed FROM gone;
    v_newest[k] := (SELECT max(e.at) FROM rate_window_entries e WHERE e.key = v_keys[k] AND e.at > v_since);
    v_gone[k] := v_freed;
    v_used[k] := coalesce(v_total, 0) - v_freed;
    IF v_newest[k] IS NULL AND v_used[k] <> 0 THEN
      -- An empty log holds nothing, whatever a total left behind says (the log emptied without it).
      v_empty[k] := true;
      v_used[k] := 0;
    END IF;
  END LOOP;

  -- Each call in input order, against what the windows hold after the calls before it.
  j := 1;
  WHILE j <= v_n LOOP
    v_first := j;
    WHILE j + 1 <= v_n AND p_calls[j + 1] = p_calls[v_first] LOOP
      j := j + 1;
    END LOOP;
    v_last := j;
    v_call_fits := true;
    FOR i IN v_first .. v_last LOOP
      k := array_position(v_keys, p_keys[i]);
      v_at[i] := k;
      v_row_used[i] := v_used[k];
      v_reset[i] := CASE WHEN v_newest[k] IS NULL THEN 0
        ELSE greatest(0, ceil(extract(epoch FROM (v_newest[k] + v_window - v_now)) * 1000))::integer END;
      IF p_amounts[i] > p_limits[i] THEN
        v_retry[i] := NULL;
        v_call_fits := false;
      ELSIF v_used[k] + p_amounts[i] <= p_limits[i] THEN
        v_retry[i] := 0;
      ELSE
        -- The oldest rows leave first: the call fits once enough of them have left. The rows this batch
        -- admitted are the newest, and leave a window from now.
        v_call_fits := false;
        v_retry[i] := CASE WHEN v_added[k] > 0 THEN p_window_ms END;
        v_freed := 0;
        FOR v_entry IN SELECT e.at, e.amount FROM rate_window_entries e
                        WHERE e.key = p_keys[i] AND e.at > v_since ORDER BY e.at, e.id
        LOOP
          v_freed := v_freed + v_entry.amount;
          IF v_used[k] - v_freed + p_amounts[i] <= p_limits[i] THEN
            v_retry[i] := greatest(1, ceil(extract(epoch FROM (v_entry.at + v_window - v_now)) * 1000))::integer;
            EXIT;
          END IF;
        END LOOP;
      END IF;
    END LOOP;
    FOR i IN v_first .. v_last LOOP
      v_fits[i] := v_call_fits;
      IF v_call_fits THEN
        k := v_at[i];
        v_used[k] := v_used[k] + p_amounts[i];
        v_added[k] := v_added[k] + p_amounts[i];
        v_newest[k] := v_now;
        v_row_used[i] := v_used[k];
        v_reset[i] := p_window_ms;
      END IF;
    END LOOP;
    j := j + 1;
  END LOOP;

  -- One row per admitted input, inserted in input order, so their ids come in that order.
  WITH added AS (
    INSERT INTO rate_window_entries (key, at, amount)
      SELECT p_keys[n], v_now, p_amounts[n] FROM generate_series(1, v_n) AS n WHERE v_fits[n] ORDER BY n
    RETURNING id
  )
  SELECT array_agg(added.id ORDER BY added.id) INTO v_ids FROM added;

  -- Each total written once, in key order: less what left, plus what was admitted.
  FOR k IN 1 .. cardinality(v_keys) LOOP
    UPDATE rate_window_totals t
       SET used = CASE WHEN v_empty[k] THEN 0 ELSE t.used - v_gone[k] END + v_added[k], swept_to = v_since
     WHERE t.key = v_keys[k];
    IF NOT FOUND AND v_added[k] > 0 THEN
      INSERT INTO rate_window_totals (key, used, swept_to) VALUES (v_keys[k], v_added[k], v_since);
    END IF;
  END LOOP;

  j := 0;
  FOR i IN 1 .. v_n LOOP
    call := p_calls[i];
    ord := i;
    used := v_row_used[i];
    reset_ms := v_reset[i];
    retry_ms := v_retry[i];
    entry_id := NULL;
    IF v_fits[i] THEN
      j := j + 1;
      entry_id := v_ids[j];
    END IF;
    RETURN NEXT;
  END LOOP;
END;
$$;
--> statement-breakpoint

-- One call's admission (svc_rate_admit_many with one call): `ord` numbers its inputs from 1.
CREATE OR REPLACE FUNCTION svc_rate_admit(p_keys text[], p_limits integer[], p_amounts integer[],
  p_window_ms integer)
RETURNS TABLE (ord integer, used bigint, reset_ms integer, retry_ms integer, entry_id bigint)
LANGUAGE sql AS $$
  SELECT a.ord, a.used, a.reset_ms, a.retry_ms, a.entry_id
    FROM svc_rate_admit_many(array_fill(1, ARRAY[coalesce(array_length(p_keys, 1), 0)]), p_keys, p_limits,
                             p_amounts, p_window_ms) AS a;
$$;
--> statement-breakpoint

-- Admitted entries' amounts set to what their calls really used (p_amounts[i] for entry p_ids[i] of key
-- p_keys[i]), and their keys' totals with them; nothing for an entry that has left the window. The
-- corrections in flight in one process share this statement. The keys' advisory locks come first, as an
-- admission's: a key's admissions and corrections take turns, so their row locks never cross (an
-- admission deletes the entries that left, a correction may be changing one of those: a call longer than
-- the window). Then the entries, then each total once, in key order. The entry's row lock still orders a
-- correction with the sweep, which deletes without the advisory locks.
CREATE OR REPLACE FUNCTION svc_rate_correct_many(p_keys text[], p_ids bigint[], p_amounts integer[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_keys text[];
  v_deltas bigint[];
BEGIN
  PERFORM svc_rate_lock_keys(p_keys);
  WITH asked AS (
    SELECT DISTINCT ON (a.id) a.id, a.amount FROM unnest(p_ids, p_amounts) AS a(id, amount) ORDER BY a.id
  ), old AS (
    SELECT e.id, e.key, e.amount FROM rate_window_entries e
      WHERE e.id IN (SELECT asked.id FROM asked) ORDER BY e.id FOR UPDATE
  ), changed AS (
    UPDATE rate_window_entries e SET amount = asked.amount FROM old, asked
     WHERE e.id = old.id AND asked.id = old.id
    RETURNING old.key, asked.amount - old.amount AS delta
  )
  SELECT array_agg(c.key ORDER BY c.key), array_agg(c.delta ORDER BY c.key) INTO v_keys, v_deltas
    FROM (SELECT changed.key, sum(changed.delta)::bigint AS delta FROM changed GROUP BY changed.key) AS c;
  PERFORM svc_rate_add_to_totals(v_keys, v_deltas);
END;
$$;
--> statement-breakpoint

-- Rows whose keys no admission comes back to, with their totals, each total written once, in key order,
-- as the admissions and corrections write them, so the three never wait on each other in a cycle. Rows an
-- admission or a correction has locked are skipped: the admission subtracts them itself, and a corrected
-- row leaves with the key's next admission or the next sweep.
CREATE OR REPLACE FUNCTION svc_rate_sweep(p_window_ms integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_keys text[];
  v_deltas bigint[];
BEGIN
  WITH gone AS (
    DELETE FROM rate_window_entries e WHERE e.id IN (
      SELECT x.id FROM rate_window_entries x
        WHERE x.at <= clock_timestamp() - make_interval(secs => p_window_ms / 1000.0)
        FOR UPDATE SKIP LOCKED)
    RETURNING e.key, e.amount
  )
  SELECT array_agg(g.key ORDER BY g.key), array_agg(-g.amount ORDER BY g.key) INTO v_keys, v_deltas
    FROM (SELECT gone.key, sum(gone.amount)::bigint AS amount FROM gone GROUP BY gone.key) AS g;
  PERFORM svc_rate_add_to_totals(v_keys, v_deltas);
END;
$$;
