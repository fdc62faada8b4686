-- Settle, take each org's next hold, and record the calls' usage, in one statement (src/billing/spend.ts
-- settleMany). Input i settles as svc_settle_holds does, which also takes input i's next hold for its
-- org when p_next_ids[i] is set (src/models/spare-holds.ts, "Holds taken ahead"; the conditions are
-- svc_settle_holds'): one round trip and one commit, synchronous, for what was a settle and a reserve,
-- and the account written once for both. next_held: the tokens held for input i's next call (0: none
-- taken). p_next_orgs[i] names the org whose call input i was; a hold that is no longer on that org's
-- account (a deleted client's, moved to its owner's pool) takes none. p_usage: each input's usage record
-- (svc_record_usage), written for the calls that settled here.
CREATE OR REPLACE FUNCTION svc_settle_and_hold_next(
  p_request_ids text[], p_actual bigint[], p_descriptions text[],
  p_next_ids text[], p_next_orgs text[], p_next_amounts bigint[], p_next_floor bigint[], p_ttl_secs double precision,
  p_usage jsonb DEFAULT NULL
) RETURNS TABLE (ord int, debited bigint, balance bigint, settled boolean, next_held bigint) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  v_n int := coalesce(array_length(p_request_ids, 1), 0);
  v_debited bigint[] := array_fill(0::bigint, ARRAY[v_n]);
  v_settled boolean[] := array_fill(false, ARRAY[v_n]);
  r record;
BEGIN
  FOR r IN SELECT s.ord AS i, s.debited AS d, s.balance AS b, s.settled AS ok, s.next_held AS nh
           FROM svc_settle_holds(p_request_ids, p_actual, p_descriptions,
                                 p_next_ids, p_next_orgs, p_next_amounts, p_next_floor, p_ttl_secs) AS s LOOP
    v_debited[r.i] := r.d;
    v_settled[r.i] := r.ok;
    ord := r.i; debited := r.d; balance := r.b; settled := r.ok; next_held := r.nh;
    RETURN NEXT;
  END LOOP;
  PERFORM svc_record_usage(p_request_ids, p_usage, v_debited, v_settled);
END;
$$;
