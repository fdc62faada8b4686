-- RPM and TPM as rolling minutes (CONTRACT §11 "Rate limits"; docs/decisions/0065-rolling-rate-windows.md;
-- src/ratelimit/rolling-window-postgres.ts). A window is the log of what was admitted under one key
-- (`rpm:org:<org>`, `tpm:token:<id>`, …): one row per admitted call, stamped with the database's clock,
-- counting `amount` (1 for a request, the hold's most for tokens, corrected to the real count at settle).
-- What a key has used is the sum of its rows younger than the window: no bucket boundary, so no burst at
-- a boundary can pass twice the limit.
CREATE TABLE IF NOT EXISTS rate_window_entries (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  key text NOT NULL,
  at timestamptz NOT NULL,
  amount integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX IF NOT EXISTS rate_window_entries_key_at ON rate_window_entries (key, at);
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
CREATE OR REPLACE FUNCTION svc_rate_admit(p_keys text[], p_limits integer[], p_amounts integer[],
  p_window_ms integer)
RETURNS TABLE (ord integer, used bigint, reset_ms integer, retry_ms integer, entry_id bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_key text;
  v_now timestamptz;
  v_since timestamptz;
  v_window interval := make_interval(secs => p_window_ms / 1000.0);
  v_n integer := coalesce(array_length(p_keys, 1), 0);
  v_used bigint[] := '{}';
  v_reset integer[] := '{}';
  v_retry integer[] := '{}';
  v_ids bigint[] := '{}';
  v_fits boolean := true;
  v_freed bigint;
  v_sum bigint;
  v_newest timestamptz;
  v_id bigint;
  v_row record;
  i integer;
BEGIN
  FOR v_key IN SELECT DISTINCT k FROM unnest(p_keys) k ORDER BY 1 LOOP
    PERFORM pg_advisory_xact_lock(hashtextextended('svc_rate:' || v_key, 0));
  END LOOP;
  v_now := clock_timestamp();
  v_since := v_now - v_window;
  DELETE FROM rate_window_entries e WHERE e.key = ANY (p_keys) AND e.at <= v_since;
  FOR i IN 1 .. v_n LOOP
    SELECT coalesce(sum(e.amount), 0), max(e.at) INTO v_sum, v_newest
      FROM rate_window_entries e WHERE e.key = p_keys[i];
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
      FOR v_row IN SELECT e.at, e.amount FROM rate_window_entries e WHERE e.key = p_keys[i] ORDER BY e.at, e.id
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
    FOR i IN 1 .. v_n LOOP
      INSERT INTO rate_window_entries (key, at, amount) VALUES (p_keys[i], v_now, p_amounts[i])
        RETURNING id INTO v_id;
      v_ids[i] := v_id;
      v_used[i] := v_used[i] + p_amounts[i];
      v_reset[i] := p_window_ms;
    END LOOP;
  END IF;
  RETURN QUERY SELECT g.i, v_used[g.i], v_reset[g.i], v_retry[g.i], v_ids[g.i]
    FROM generate_series(1, v_n) AS g(i);
END;
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
