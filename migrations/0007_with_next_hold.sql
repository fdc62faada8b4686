-- Settle, and take each org's next hold in the same statement (src/models/spare-holds.ts, "Holds taken
-- ahead"). Input i settles as svc_settle_holds does; when p_next_ids[i] is set and the call settled
-- leaving org p_next_orgs[i] a balance of at least p_next_floor[i], a hold of exactly p_next_amounts[i]
-- is taken for no user (svc_reserve_holds), for that org's next call. One round trip and one commit where
-- there were two, and nothing left for the database to do once the call's last byte has left.
-- next_held: the tokens held for input i's next call (0: none taken). Locks: the next holds' accounts are
-- org accounts this statement's settle already locked (a hold moved to the owner's pool takes none). The settle commits synchronously, and the hold
-- would not change that: svc_reserve_holds turns synchronous_commit off for its transaction, so the
-- setting found on entry is put back. p_usage: each input's usage record (svc_record_usage), written for
-- the calls that settled here.
CREATE OR REPLACE FUNCTION svc_settle_and_hold_next(
  p_request_ids text[], p_actual bigint[], p_descriptions text[],
  p_next_ids text[], p_next_orgs text[], p_next_amounts bigint[], p_next_floor bigint[], p_ttl_secs double precision,
  p_usage jsonb DEFAULT NULL
) RETURNS TABLE (ord int, debited bigint, balance bigint, settled boolean, next_held bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_sync text := current_setting('synchronous_commit');
  v_n int := coalesce(array_length(p_request_ids, 1), 0);
  v_debited bigint[] := array_fill(0::bigint, ARRAY[v_n]);
  v_balance bigint[] := array_fill(NULL::bigint, ARRAY[v_n]);
  v_settled boolean[] := array_fill(false, ARRAY[v_n]);
  v_next bigint[] := array_fill(0::bigint, ARRAY[v_n]);
  -- The inputs whose next hold is taken, and that hold's arguments for svc_reserve_holds, in step.
  v_pick int[] := '{}';
  v_ids text[] := '{}';
  v_orgs text[] := '{}';
  v_users text[] := '{}';
  v_amounts bigint[] := '{}';
  v_ttls double precision[] := '{}';
  r record;
BEGIN
  FOR r IN SELECT s.ord AS i, s.debited AS d, s.balance AS b, s.settled AS ok
           FROM svc_settle_holds(p_request_ids, p_actual, p_descriptions) AS s LOOP
    v_debited[r.i] := r.d;
    v_balance[r.i] := r.b;
    v_settled[r.i] := r.ok;
    -- Only for a hold still on its org's account: one a client's deletion re-pointed at the owner's pool
    -- (src/billing/deleted-client.ts) had this settle lock `pool:…`, and taking the org's next hold would
    -- then lock `org:…` after it, against the ascending order (and the org is gone: nothing to hold).
    -- And none for an org with member budgets (member-budgets.sql): adopting one would skip the budget's
    -- check, which a hold of the call's own makes.
    IF r.ok AND p_next_ids[r.i] IS NOT NULL AND r.b >= p_next_floor[r.i]
       AND EXISTS (SELECT 1 FROM billing_holds h
                   WHERE h.request_id = p_request_ids[r.i] AND h.account_id = 'org:' || p_next_orgs[r.i])
       AND NOT EXISTS (SELECT 1 FROM member_budgets b WHERE b.org_key = p_next_orgs[r.i] AND b.cleared_at IS NULL) THEN
      v_pick := v_pick || r.i;
      v_ids := v_ids || p_next_ids[r.i];
      v_orgs := v_orgs || p_next_orgs[r.i];
      v_users := array_append(v_users, NULL::text);
      v_amounts := v_amounts || p_next_amounts[r.i];
      v_ttls := v_ttls || p_ttl_secs;
    END IF;
  END LOOP;
  PERFORM svc_record_usage(p_request_ids, p_usage, v_debited, v_settled);

  IF array_length(v_pick, 1) > 0 THEN
    -- Exactly the amount (least and most alike), for no user.
    FOR r IN SELECT h.ord AS k, h.take AS t, h.outcome AS o
             FROM svc_reserve_holds(v_ids, v_orgs, v_users, v_amounts, v_amounts, v_ttls) AS h LOOP
      IF r.o = 'held' THEN
        v_next[v_pick[r.k]] := r.t;
      END IF;
    END LOOP;
    PERFORM set_config('synchronous_commit', v_sync, true);
  END IF;

  FOR i IN 1 .. v_n LOOP
    ord := i; debited := v_debited[i]; balance := v_balance[i]; settled := v_settled[i]; next_held := v_next[i];
    RETURN NEXT;
  END LOOP;
END;
$$;
