-- Member budgets (src/db/tables/budgets.ts; docs/billing.md, "Member budgets"): a call of
-- a member with a budget (or made with a token that has one) holds only what the budget still has this
-- period, in the same statement as its hold. Holds count against the budget as they are taken; a settle
-- gives back what it did not debit, so a period's debits never exceed its budget.
--
-- Lock order. Every hold statement locks, as always, hold rows and then accounts (svc_reserve_holds); the
-- budget's period rows come after those. A settle never locks a period row: it appends what it gives back
-- to member_budget_returns (the trigger below), and the next hold against that period folds it in under
-- the period's lock. So budgets add no edge to the settle's lock order and no cycle with any hold.

-- The start (UTC) of the day, ISO week (Monday) or month that `p_at` falls in.
CREATE OR REPLACE FUNCTION svc_budget_period_start(p_period text, p_at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
  SELECT date_trunc(p_period, p_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
$$;
--> statement-breakpoint

-- svc_reserve_holds (model-path-functions.sql) with the budgets of each input's member (p_user_ids[i] in
-- p_org_keys[i]) and token (p_token_ids[i], null for another credential). An input whose budgets cannot
-- pay p_min[i] this period holds nothing ('budget_exhausted'); the others hold at most what their budgets
-- have left. Inputs of orgs without budgets go straight to svc_reserve_holds.
CREATE OR REPLACE FUNCTION svc_reserve_budgeted(
  p_request_ids text[], p_org_keys text[], p_user_ids text[], p_token_ids int[],
  p_min bigint[], p_max bigint[], p_ttl_secs double precision[]
) RETURNS TABLE (ord int, take bigint, outcome text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_n int := coalesce(array_length(p_request_ids, 1), 0);
  v_u1 bigint[] := array_fill(NULL::bigint, ARRAY[v_n]); -- the member budget's period row
  v_u2 bigint[] := array_fill(NULL::bigint, ARRAY[v_n]); -- the token budget's period row
  v_hi bigint[] := p_max;
  v_take bigint[] := array_fill(0::bigint, ARRAY[v_n]);
  v_out text[] := array_fill(NULL::text, ARRAY[v_n]);
  v_pass int[] := '{}'; -- the inputs handed to svc_reserve_holds
  v_usage bigint[];
  v_room bigint;
  v_keep bigint;
  v_account text;
  r record;
BEGIN
  IF v_n = 0 OR NOT EXISTS (
    SELECT 1 FROM member_budgets b WHERE b.org_key = ANY(p_org_keys) AND b.cleared_at IS NULL
  ) THEN
    RETURN QUERY SELECT h.ord, h.take, h.outcome
      FROM svc_reserve_holds(p_request_ids, p_org_keys, p_user_ids, p_min, p_max, p_ttl_secs) AS h;
    RETURN;
  END IF;

  -- This period's row of every budget that applies, created in budget id order (two batches starting
  -- the same periods wait for each other in one order).
  INSERT INTO member_budget_usage (budget_id, period_start)
    SELECT b.id, svc_budget_period_start(b.period, now())
    FROM member_budgets b
    JOIN generate_subscripts(p_request_ids, 1) AS i
      ON b.org_key = p_org_keys[i] AND b.cleared_at IS NULL
     AND ((b.api_token_id IS NULL AND b.user_id = p_user_ids[i]) OR b.api_token_id = p_token_ids[i])
    GROUP BY b.id, b.period ORDER BY b.id
    ON CONFLICT (budget_id, period_start) DO NOTHING;
  FOR r IN
    SELECT i, u.id AS usage_id, b.api_token_id IS NOT NULL AS by_token
    FROM generate_subscripts(p_request_ids, 1) AS i
    JOIN member_budgets b
      ON b.org_key = p_org_keys[i] AND b.cleared_at IS NULL
     AND ((b.api_token_id IS NULL AND b.user_id = p_user_ids[i]) OR b.api_token_id = p_token_ids[i])
    JOIN member_budget_usage u ON u.budget_id = b.id AND u.period_start = svc_budget_period_start(b.period, now())
  LOOP
    IF r.by_token THEN v_u2[r.i] := r.usage_id; ELSE v_u1[r.i] := r.usage_id; END IF;
  END LOOP;

  -- A first look, unlocked: an input whose budget is spent holds nothing, and the others ask for no more
  -- than their budgets have. The look may be stale; the locked check after the holds decides.
  FOR i IN 1 .. v_n LOOP
    IF v_u1[i] IS NOT NULL OR v_u2[i] IS NOT NULL THEN
      v_room := svc_budget_room(v_u1[i], v_u2[i]);
      IF v_room < greatest(p_min[i], 0) THEN
        v_out[i] := 'budget_exhausted';
        CONTINUE;
      END IF;
      v_hi[i] := least(p_max[i], v_room);
    END IF;
    v_pass := v_pass || i;
  END LOOP;

  IF array_length(v_pass, 1) > 0 THEN
    FOR r IN
      SELECT v_pass[h.ord] AS i, h.take AS t, h.outcome AS o FROM svc_reserve_holds(
        (SELECT array_agg(p_request_ids[k] ORDER BY n) FROM unnest(v_pass) WITH ORDINALITY AS x(k, n)),
        (SELECT array_agg(p_org_keys[k] ORDER BY n) FROM unnest(v_pass) WITH ORDINALITY AS x(k, n)),
        (SELECT array_agg(p_user_ids[k] ORDER BY n) FROM unnest(v_pass) WITH ORDINALITY AS x(k, n)),
        (SELECT array_agg(p_min[k] ORDER BY n) FROM unnest(v_pass) WITH ORDINALITY AS x(k, n)),
        (SELECT array_agg(v_hi[k] ORDER BY n) FROM unnest(v_pass) WITH ORDINALITY AS x(k, n)),
        (SELECT array_agg(p_ttl_secs[k] ORDER BY n) FROM unnest(v_pass) WITH ORDINALITY AS x(k, n))) AS h
    LOOP
      v_take[r.i] := r.t;
      v_out[r.i] := r.o;
    END LOOP;
  END IF;

  -- The check that decides, after hold rows and accounts: lock the period rows the holds count against,
  -- in id order, fold in what settles gave back, then count each hold in input order. A hold the budget
  -- cannot cover whole is cut to what it can (still at least p_min), or taken back whole.
  SELECT array_agg(DISTINCT x ORDER BY x) INTO v_usage
    FROM unnest(v_u1 || v_u2) AS x
    WHERE x IS NOT NULL;
  IF v_usage IS NULL THEN
    RETURN QUERY SELECT i, v_take[i], v_out[i] FROM generate_subscripts(p_request_ids, 1) AS i;
    RETURN;
  END IF;
  PERFORM 1 FROM member_budget_usage u WHERE u.id = ANY(v_usage) ORDER BY u.id FOR UPDATE;
  WITH d AS (DELETE FROM member_budget_returns x WHERE x.usage_id = ANY(v_usage) RETURNING x.usage_id, x.amount),
       s AS (SELECT d.usage_id, sum(d.amount)::bigint AS amount FROM d GROUP BY d.usage_id)
  UPDATE member_budget_usage u SET used = greatest(0, u.used - s.amount) FROM s WHERE u.id = s.usage_id;

  FOR i IN 1 .. v_n LOOP
    CONTINUE WHEN v_out[i] IS DISTINCT FROM 'held' OR (v_u1[i] IS NULL AND v_u2[i] IS NULL);
    v_room := svc_budget_room(v_u1[i], v_u2[i]);
    v_keep := least(v_take[i], greatest(v_room, 0));
    SELECT h.account_id INTO v_account FROM billing_holds h WHERE h.request_id = p_request_ids[i];
    IF v_keep < greatest(p_min[i], 0) OR (v_keep = 0 AND v_take[i] > 0) THEN
      -- Taken back: the hold row is this statement's own, and its account is locked by it.
      DELETE FROM billing_holds h WHERE h.request_id = p_request_ids[i];
      UPDATE billing_accounts SET held = held - v_take[i] WHERE id = v_account;
      v_take[i] := 0;
      v_out[i] := 'budget_exhausted';
      CONTINUE;
    END IF;
    -- Marked, so its close gives back to the periods (the trigger below); cut to what the budgets have.
    UPDATE billing_holds h SET budgeted = true, amount = v_keep WHERE h.request_id = p_request_ids[i];
    IF v_keep < v_take[i] THEN
      UPDATE billing_accounts SET held = held - (v_take[i] - v_keep) WHERE id = v_account;
      v_take[i] := v_keep;
    END IF;
    UPDATE member_budget_usage u SET used = u.used + v_keep WHERE u.id IN (v_u1[i], v_u2[i]);
    INSERT INTO member_budget_holds (request_id, usage_id)
      SELECT p_request_ids[i], x FROM unnest(ARRAY[v_u1[i], v_u2[i]]) AS x WHERE x IS NOT NULL;
  END LOOP;

  RETURN QUERY SELECT i, v_take[i], v_out[i] FROM generate_subscripts(p_request_ids, 1) AS i;
END;
$$;
--> statement-breakpoint

-- What is left of one or two budgets' periods (a null row: no limit from it): the limit, minus what holds
-- and debits used, plus what settles gave back and no hold has folded in yet.
CREATE OR REPLACE FUNCTION svc_budget_room(p_u1 bigint, p_u2 bigint) RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT min(b.limit_credits - u.used
             + coalesce((SELECT sum(x.amount) FROM member_budget_returns x WHERE x.usage_id = u.id), 0))::bigint
  FROM member_budget_usage u JOIN member_budgets b ON b.id = u.budget_id
  WHERE u.id IN (p_u1, p_u2);
$$;
--> statement-breakpoint

-- A hold closes (settled, voided, or an expired one settled late): what it held and did not debit goes
-- back to the periods it counted against. Only appended: a settle never waits for a budget (see the top).
CREATE OR REPLACE FUNCTION svc_budget_hold_closed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  WITH d AS (DELETE FROM member_budget_holds m WHERE m.request_id = NEW.request_id RETURNING m.usage_id)
  INSERT INTO member_budget_returns (usage_id, amount)
    SELECT d.usage_id, NEW.amount - NEW.debited FROM d WHERE NEW.amount > NEW.debited;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER billing_holds_budget_closed AFTER UPDATE OF status ON billing_holds
  FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('settled', 'voided') AND NEW.budgeted)
  EXECUTE FUNCTION svc_budget_hold_closed();
