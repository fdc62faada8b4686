-- The model path's hot statements, each serving a whole batch of calls in one round trip and one commit
-- (src/db/batch.ts groups the calls; src/billing/spend.ts and src/models/concurrency.ts call these).
-- PL/pgSQL because each step must read the newest committed row under its lock: in READ COMMITTED every
-- statement here takes a fresh snapshot, and SELECT … FOR UPDATE returns the row version it locked. The
-- plans of the statements inside are prepared once per connection.
--
-- Lock order, as everywhere in billing: hold rows first, then accounts in ascending id ('org:…' before
-- 'sink:…').

-- Marks the expired holds of one account released; returns the tokens they held (the caller takes them
-- off the account's `held`). A hold another transaction has locked is skipped, never waited for: that
-- transaction is closing it (a settle, a void) or moving it (a client's deletion, deleted-client.ts), and
-- a reserve calls this while it holds the account's lock, so waiting for a hold row there would be the
-- one wait against the lock order (hold rows, then accounts) and could close a deadlock.
CREATE OR REPLACE FUNCTION svc_release_expired_holds(p_account text) RETURNS bigint LANGUAGE sql AS $$
  WITH c AS (
    SELECT h.request_id FROM billing_holds h
    WHERE h.account_id = p_account AND h.status = 'held' AND h.expires_at < now()
    FOR UPDATE SKIP LOCKED),
  e AS (
    UPDATE billing_holds h SET status = 'expired', closed_at = now()
    FROM c WHERE h.request_id = c.request_id
    RETURNING h.amount)
  SELECT coalesce(sum(e.amount), 0)::bigint FROM e;
$$;
--> statement-breakpoint

-- Reserve (CONTRACT §8: hold the most a call can cost before it runs). Input i asks for at least p_min[i]
-- and at most p_max[i] tokens of the allocation of org p_org_keys[i]; the requests of one org are served
-- in input order from what its allocation still has (balance − held, its expired holds released when they
-- matter).
-- Outcome per input: 'held' (take = the tokens held), 'insufficient' (cannot pay p_min: interface
-- document, Billing rule 5) or 'duplicate' (the request id already has a hold).
-- A hold is temporary state, so this commits without waiting for the WAL flush: the settle that follows
-- commits synchronously, and the WAL is ordered, so a durable debit implies a durable hold.
CREATE OR REPLACE FUNCTION svc_reserve_holds(
  p_request_ids text[], p_org_keys text[], p_user_ids text[], p_min bigint[], p_max bigint[], p_ttl_secs double precision[]
) RETURNS TABLE (ord int, take bigint, outcome text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_accounts text[];
  v_account text;
  v_need bigint;
  v_expired_released boolean;
  v_released bigint;
  v_available bigint;
  v_added bigint;
  v_take bigint;
  r record;
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  SELECT array_agg(DISTINCT 'org:' || k ORDER BY 'org:' || k) INTO v_accounts FROM unnest(p_org_keys) AS k;

  -- Each account, in ascending id order: lock it, serve its requests in input order, write it once.
  FOREACH v_account IN ARRAY coalesce(v_accounts, '{}') LOOP
    -- Expired holds (left by a crashed process) change what a batch gets only when the account cannot
    -- cover every request of it at its maximum; only then are they released here (the sweep releases
    -- the rest: src/billing/spend.ts expireStaleHolds). Releasing scans the account's hold index, the
    -- costliest step of a hold on a busy account. Hold rows first: they are released before the account
    -- row is locked, judged on an unlocked read of it.
    SELECT coalesce(sum(p_max[i]), 0) INTO v_need FROM generate_subscripts(p_org_keys, 1) AS i WHERE 'org:' || p_org_keys[i] = v_account;
    v_released := 0;
    v_expired_released := (SELECT b.balance - b.held FROM billing_accounts b WHERE b.id = v_account) < v_need;
    IF v_expired_released THEN
      v_released := svc_release_expired_holds(v_account);
    END IF;
    SELECT b.balance - b.held + v_released INTO v_available FROM billing_accounts b WHERE b.id = v_account FOR UPDATE;
    IF v_available < v_need AND NOT v_expired_released THEN
      -- Another batch took from the account between the look and the lock. Released under the lock now:
      -- svc_release_expired_holds skips the hold rows others have locked, so this never waits for one
      -- while it holds the account (the lock order stays hold rows, then accounts).
      v_released := svc_release_expired_holds(v_account);
      v_available := v_available + v_released;
    END IF;
    v_added := 0;
    FOR r IN
      SELECT i, p_request_ids[i] AS rid, p_org_keys[i] AS org, p_user_ids[i] AS uid, p_min[i] AS lo, p_max[i] AS hi, p_ttl_secs[i] AS ttl
      FROM generate_subscripts(p_request_ids, 1) AS i
      WHERE 'org:' || p_org_keys[i] = v_account
      ORDER BY i
    LOOP
      ord := r.i;
      take := 0;
      IF EXISTS (SELECT 1 FROM billing_holds h WHERE h.request_id = r.rid) THEN
        outcome := 'duplicate';
      ELSIF v_available IS NULL OR v_available < r.lo THEN
        outcome := 'insufficient';
      ELSE
        v_take := least(r.hi, v_available);
        INSERT INTO billing_holds (request_id, account_id, org_key, user_id, amount, expires_at)
          VALUES (r.rid, v_account, r.org, r.uid, v_take, now() + make_interval(secs => r.ttl));
        v_available := v_available - v_take;
        v_added := v_added + v_take;
        take := v_take;
        outcome := 'held';
      END IF;
      RETURN NEXT;
    END LOOP;
    IF v_added <> 0 OR v_released <> 0 THEN
      UPDATE billing_accounts SET held = held - v_released + v_added WHERE id = v_account;
    END IF;
  END LOOP;
END;
$$;
--> statement-breakpoint

-- Settle (CONTRACT §8: debit the real cost after the call). Input i debits min(p_actual[i], its hold) and
-- releases the whole hold, exactly once per request id: the live hold is redeemed by a guarded UPDATE,
-- and whoever finds none did not settle it ('settled' = false; src/billing/spend.ts then reports the
-- first result or settles an expired hold). Each call that spent writes one `usage` ledger row
-- (idempotency key usage:<request id>) whose org_balance_after is the balance right after that call;
-- each org account and each usage sink is written once per batch. Commits synchronously: a debit is
-- durable when the caller hears of it.
--
-- The org's next hold (src/models/spare-holds.ts, "Holds taken ahead"; all p_next_* NULL: none): when
-- p_next_ids[i] is set, input i settled on the account of org p_next_orgs[i] (not a deleted client's
-- hold moved to its owner's pool), leaving a balance of at least p_next_floor[i] and room for
-- p_next_amounts[i] beside what the account still holds, and the org has no member budgets (a hold of
-- the call's own checks those: member-budgets.sql), a hold of exactly that amount for no user is taken
-- here, under the account lock the settle holds and in the same account write (next_held: its tokens,
-- 0 for none). A new hold row taken under an account lock is what a reserve does too. Member budgets
-- are looked for once per statement, and only when one of its inputs may take a next hold.
--
-- The accounts are locked by one read and written by one update for the whole batch, however many
-- organizations it spans: a statement PostgreSQL executes costs more than a row it writes (its executor
-- is set up, the table's check constraints and trigger conditions are read again), and a batch of calls
-- of as many organizations would otherwise lock and write each account with statements of its own.
-- Its statements run on generic plans (plan_cache_mode): for a statement over an array parameter, a plan
-- made for the array at hand is estimated cheaper than the generic one, so PostgreSQL would plan it
-- again at every call (decision 0169).
--
-- p_usage: each input's usage record (svc_record_usage, src/db/custom/usage-records.sql), written last for
-- the calls that settled here: the settle, the next holds and the usage records in one statement, one round
-- trip and one commit (src/billing/spend.ts settleMany).
CREATE OR REPLACE FUNCTION svc_settle_holds(
  p_request_ids text[], p_actual bigint[], p_descriptions text[],
  p_next_ids text[] DEFAULT NULL, p_next_orgs text[] DEFAULT NULL, p_next_amounts bigint[] DEFAULT NULL,
  p_next_floor bigint[] DEFAULT NULL, p_ttl_secs double precision DEFAULT NULL, p_usage jsonb DEFAULT NULL
) RETURNS TABLE (ord int, debited bigint, balance bigint, settled boolean, next_held bigint) LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
#variable_conflict use_column
DECLARE
  v_n int := coalesce(array_length(p_request_ids, 1), 0);
  v_debited bigint[] := array_fill(0::bigint, ARRAY[v_n]);
  v_settled boolean[] := array_fill(false, ARRAY[v_n]);
  v_order int[];
  -- The calls whose live hold this statement redeemed: the j-th is input v_ords[j], on account v_accounts[j].
  v_ords int[] := '{}';
  v_accounts text[] := '{}';
  v_orgs text[] := '{}';
  v_amounts bigint[] := '{}';
  v_debits bigint[] := '{}';
  v_sinks text[] := '{}';
  v_account text;
  v_org text;
  v_amount bigint;
  v_debit bigint;
  -- The accounts this statement writes: what each had when locked, and what the statement adds to it.
  v_ids text[];
  v_balances bigint[];
  v_helds bigint[];
  v_add_balance bigint[];
  v_add_held bigint[];
  v_at int;
  v_sink int;
  v_balance bigint;
  v_held bigint;
  v_budgeted text[];
  v_next bigint;
  i int;
  j int;
BEGIN
  -- Hold rows first, in request-id order: redeem each live hold. (Here and below, a batch of one — every
  -- call of a paced load — needs no ordering query.)
  IF v_n = 1 THEN
    v_order := '{1}';
  ELSE
    v_order := (SELECT array_agg(k ORDER BY p_request_ids[k], k) FROM generate_subscripts(p_request_ids, 1) AS k);
  END IF;
  FOREACH i IN ARRAY coalesce(v_order, '{}') LOOP
    UPDATE billing_holds h SET status = 'settled', debited = least(greatest(0, p_actual[i]), h.amount), closed_at = now()
      WHERE h.request_id = p_request_ids[i] AND h.status = 'held'
      RETURNING h.account_id, h.org_key, h.amount, h.debited INTO v_account, v_org, v_amount, v_debit;
    IF FOUND THEN
      v_ords := v_ords || i;
      v_accounts := v_accounts || v_account;
      v_orgs := v_orgs || v_org;
      v_amounts := v_amounts || v_amount;
      v_debits := v_debits || v_debit;
      IF v_debit > 0 THEN
        v_sinks := v_sinks || ('sink:' || v_org);
      END IF;
    ELSE
      ord := i; debited := 0; balance := NULL; settled := false; next_held := 0;
      RETURN NEXT;
    END IF;
  END LOOP;
  IF cardinality(v_ords) = 0 THEN
    RETURN;
  END IF;

  -- Then every account the statement writes, locked by one read in ascending id order: the accounts the
  -- holds were on ('org:…', or a deleted client's owner's 'pool:…') and the usage sinks ('sink:…', after
  -- both) of the calls that spent. The ledger has no foreign key to its accounts (decision 0138): a sink
  -- that is missing fails the settle here, rather than leaving `usage` rows naming none.
  SELECT array_agg(a.id), array_agg(a.balance), array_agg(a.held) INTO v_ids, v_balances, v_helds
    FROM (SELECT b.id, b.balance, b.held FROM billing_accounts b
          WHERE b.id = ANY (v_accounts || v_sinks) ORDER BY b.id FOR UPDATE) AS a;
  v_add_balance := array_fill(0::bigint, ARRAY[cardinality(v_ids)]);
  v_add_held := array_fill(0::bigint, ARRAY[cardinality(v_ids)]);

  -- Each call's debit (and next hold), account by account in input order; v_balance and v_held follow
  -- the account as this statement leaves it, and what the statement adds to an account is set when the
  -- loop leaves it (a sink's credits are added call by call: a deleted client's pool pays several sinks).
  IF cardinality(v_ords) = 1 THEN
    v_order := '{1}';
  ELSE
    v_order := (SELECT array_agg(k ORDER BY v_accounts[k], v_ords[k]) FROM generate_subscripts(v_ords, 1) AS k);
  END IF;
  FOREACH j IN ARRAY v_order LOOP
    i := v_ords[j];
    IF v_at IS NULL OR v_ids[v_at] <> v_accounts[j] THEN
      IF v_at IS NOT NULL THEN
        v_add_balance[v_at] := v_balance - v_balances[v_at];
        v_add_held[v_at] := v_held - v_helds[v_at];
      END IF;
      v_at := array_position(v_ids, v_accounts[j]);
      IF v_at IS NULL THEN
        RAISE EXCEPTION 'no ledger account %', v_accounts[j] USING ERRCODE = 'foreign_key_violation';
      END IF;
      v_balance := v_balances[v_at];
      v_held := v_helds[v_at];
    END IF;
    v_balance := v_balance - v_debits[j];
    v_held := v_held - v_amounts[j];
    IF v_debits[j] > 0 THEN
      IF v_sink IS NULL OR v_ids[v_sink] <> 'sink:' || v_orgs[j] THEN
        v_sink := array_position(v_ids, 'sink:' || v_orgs[j]);
        IF v_sink IS NULL THEN
          RAISE EXCEPTION 'no ledger account sink:%', v_orgs[j] USING ERRCODE = 'foreign_key_violation';
        END IF;
      END IF;
      v_add_balance[v_sink] := v_add_balance[v_sink] + v_debits[j];
      INSERT INTO billing_entries (key, from_account, to_account, amount, type, org_key, org_amount, org_balance_after, description)
        VALUES ('usage:' || p_request_ids[i], v_accounts[j], 'sink:' || v_orgs[j], v_debits[j], 'usage', v_orgs[j],
                -v_debits[j], v_balance, p_descriptions[i]);
    END IF;
    v_next := 0;
    IF p_next_ids[i] IS NOT NULL AND v_accounts[j] = 'org:' || p_next_orgs[i]
       AND v_balance >= p_next_floor[i] AND v_balance - v_held >= p_next_amounts[i] AND p_next_amounts[i] > 0 THEN
      -- Member budgets are looked for once, for every org of the statement, and only when a call may take
      -- a next hold (a hold of the call's own checks those: member-budgets.sql).
      IF v_budgeted IS NULL THEN
        v_budgeted := ARRAY(SELECT DISTINCT b.org_key FROM member_budgets b
                            WHERE b.org_key = ANY (v_orgs) AND b.cleared_at IS NULL);
      END IF;
      IF NOT (v_orgs[j] = ANY (v_budgeted)) THEN
        -- A request id that has a hold already takes none: a repeated id never fails the batch.
        INSERT INTO billing_holds (request_id, account_id, org_key, user_id, amount, expires_at)
          VALUES (p_next_ids[i], v_accounts[j], v_orgs[j], NULL, p_next_amounts[i], now() + make_interval(secs => p_ttl_secs))
          ON CONFLICT (request_id) DO NOTHING;
        IF FOUND THEN
          v_next := p_next_amounts[i];
          v_held := v_held + v_next;
        END IF;
      END IF;
    END IF;
    v_debited[i] := v_debits[j];
    v_settled[i] := true;
    ord := i; debited := v_debits[j]; balance := v_balance; settled := true; next_held := v_next;
    RETURN NEXT;
  END LOOP;
  v_add_balance[v_at] := v_balance - v_balances[v_at];
  v_add_held[v_at] := v_held - v_helds[v_at];

  -- Each account written once: the org accounts' debits and holds, the sinks' credits.
  UPDATE billing_accounts b SET balance = b.balance + d.add_balance, held = b.held + d.add_held
    FROM unnest(v_ids, v_add_balance, v_add_held) AS d(id, add_balance, add_held)
    WHERE b.id = d.id;

  IF p_usage IS NOT NULL THEN
    PERFORM svc_record_usage(p_request_ids, p_usage, v_debited, v_settled);
  END IF;
END;
$$;
--> statement-breakpoint

-- Voids (CONTRACT §8: a failed call debits nothing; an org's spares given back, decision 0170): every
-- hold of p_request_ids still held is voided, then each account's `held` is lowered once by what its
-- holds held. Two statements, each on a fresh snapshot (see the top): the accounts' update reads each row
-- as the holds' last mover left it (a client deleted meanwhile re-points its holds, and their tokens, at
-- its owner's pool: src/billing/deleted-client.ts). With p_flush false the commit does not wait for the
-- WAL flush (spares nobody will settle: a void a crash forgets leaves its hold to expire). Returns the
-- tokens released.
CREATE OR REPLACE FUNCTION svc_void_holds(p_request_ids text[], p_flush boolean) RETURNS bigint
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_ids text[];
  v_amounts bigint[];
BEGIN
  IF NOT p_flush THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  WITH voided AS (
    UPDATE billing_holds h SET status = 'voided', closed_at = now()
      WHERE h.request_id = ANY (p_request_ids) AND h.status = 'held'
      RETURNING h.account_id, h.amount)
  SELECT array_agg(g.account_id ORDER BY g.account_id), array_agg(g.amount ORDER BY g.account_id)
    INTO v_ids, v_amounts
    FROM (SELECT v.account_id, sum(v.amount)::bigint AS amount FROM voided v GROUP BY v.account_id) g;
  IF v_ids IS NULL THEN
    RETURN 0;
  END IF;
  UPDATE billing_accounts b SET held = b.held - d.amount
    FROM unnest(v_ids, v_amounts) AS d(id, amount) WHERE b.id = d.id;
  RETURN (SELECT sum(a) FROM unnest(v_amounts) AS a);
END;
$$;
--> statement-breakpoint

-- Concurrency leases (CONTRACT §9, ORG_MAX_CONCURRENCY; src/models/concurrency.ts): input i asks for a
-- slot of org p_org_ids[i] under the cap. A slot is free when it has no row or only an expired one; the
-- primary key (org_id, slot) makes two takers of one slot serialise, and the loser's guarded upsert
-- (only over an expired lease) gets nothing and tries once more on a fresh snapshot. The scan starts at
-- a random slot, so concurrent takers spread out and a large cap costs a probe or two. Leases are
-- ephemeral: committed without waiting for the WAL flush (a database crash may forget the last few, so
-- the cap can be briefly exceeded after it; never a wrong balance). Returns the inputs that got a slot.
CREATE OR REPLACE FUNCTION svc_take_leases(
  p_org_ids text[], p_lease_ids text[], p_kinds text[], p_cap int, p_ttl_secs double precision
) RETURNS TABLE (ord int, slot int) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_start int;
  v_slot int;
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  FOR i IN 1 .. coalesce(array_length(p_lease_ids, 1), 0) LOOP
    v_slot := NULL;
    FOR attempt IN 1 .. 2 LOOP
      v_start := floor(random() * p_cap)::int;
      INSERT INTO concurrency_leases AS l (org_id, slot, lease_id, kind, expires_at)
        SELECT p_org_ids[i], s.n, p_lease_ids[i], p_kinds[i], now() + make_interval(secs => p_ttl_secs)
        FROM (SELECT (g + v_start) % p_cap AS n FROM generate_series(0, p_cap - 1) AS g) AS s
        WHERE NOT EXISTS (
          SELECT 1 FROM concurrency_leases c WHERE c.org_id = p_org_ids[i] AND c.slot = s.n AND c.expires_at > now())
        LIMIT 1
      ON CONFLICT (org_id, slot) DO UPDATE
        SET lease_id = excluded.lease_id, kind = excluded.kind, expires_at = excluded.expires_at, acquired_at = now()
        WHERE l.expires_at <= now()
      RETURNING l.slot INTO v_slot;
      EXIT WHEN v_slot IS NOT NULL;
    END LOOP;
    IF v_slot IS NOT NULL THEN
      ord := i;
      slot := v_slot;
      RETURN NEXT;
    END IF;
  END LOOP;
END;
$$;
