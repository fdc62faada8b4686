-- Admission of model calls made with `svc_` API tokens, in one statement per batch (src/models/admit.ts):
-- who the token acts for, read live as the account auth reads it (src/auth/principal.ts: the token
-- unrevoked, its user, the org, the user's membership there), and, for each call whose caller may spend
-- (a verified user, a live member of a live org, not a viewer: CONTRACT §7, §9), its hold on that org's
-- allocation through svc_reserve_holds (model-path-functions.sql). The auth read and the hold share one
-- round trip instead of following each other. A call whose caller may not spend holds nothing; the
-- caller's code turns the returned row into the same 401/403 as the account auth.
-- Credential options (CONTRACT §6): an expired token reads as unknown ('no_token'); one without the
-- `model` scope is 'insufficient_scope'. The token's last use is stamped here, at most once a minute,
-- so that a call admitted in this statement writes no statement of its own for it.
-- Outcome per input: 'no_token' (unknown or revoked), 'refused' (read, but may not spend), or
-- svc_reserve_holds' 'held' / 'insufficient' / 'duplicate', or 'budget_exhausted' (the member's or the
-- token's budget: svc_reserve_budgeted, member-budgets.sql).
CREATE OR REPLACE FUNCTION svc_admit_api_calls(
  p_token_hashes text[], p_request_ids text[], p_min bigint[], p_max bigint[], p_ttl_secs double precision[]
) RETURNS TABLE (
  ord int, token_id int, user_id text, org_key text, role text, email_verified boolean, org_deleted boolean,
  take bigint, outcome text
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  r record;
  v_ords int[] := '{}';
  v_rids text[] := '{}';
  v_orgs text[] := '{}';
  v_users text[] := '{}';
  v_lo bigint[] := '{}';
  v_hi bigint[] := '{}';
  v_ttl double precision[] := '{}';
  v_tids int[] := '{}';
  v_roles text[] := '{}';
BEGIN
  FOR i IN 1 .. coalesce(array_length(p_token_hashes, 1), 0) LOOP
    -- One indexed read per token (api_tokens_hash_idx), the account auth's read.
    SELECT i, t.id AS tid, t.user_id AS uid, t.org_id AS org, m.role AS mrole,
           u.email_verified_at IS NOT NULL AS verified, o.deleted_at IS NOT NULL AS deleted,
           'model' = ANY(t.scopes) AS model_scope, t.last_used_at AS last_used
      INTO r
      FROM api_tokens t
      JOIN users u ON u.id = t.user_id
      JOIN orgs o ON o.id = t.org_id
      LEFT JOIN memberships m ON m.org_id = t.org_id AND m.user_id = t.user_id
      WHERE t.token_hash = p_token_hashes[i] AND t.revoked_at IS NULL
        AND (t.expires_at IS NULL OR t.expires_at > now());
    IF NOT FOUND THEN
      SELECT i, NULL::int AS tid, NULL::text AS uid, NULL::text AS org, NULL::text AS mrole, false AS verified, false AS deleted,
             false AS model_scope, NULL::timestamptz AS last_used INTO r;
    ELSIF r.last_used IS NULL OR r.last_used < now() - interval '1 minute' THEN
      UPDATE api_tokens SET last_used_at = now()
        WHERE id = r.tid AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute');
    END IF;
    ord := r.i;
    token_id := r.tid;
    user_id := r.uid;
    org_key := r.org;
    role := r.mrole;
    email_verified := coalesce(r.verified, false);
    org_deleted := coalesce(r.deleted, false);
    take := 0;
    IF r.tid IS NULL OR r.uid IS NULL OR r.org IS NULL THEN
      outcome := 'no_token';
      RETURN NEXT;
    ELSIF NOT r.model_scope THEN
      outcome := 'insufficient_scope';
      RETURN NEXT;
    ELSIF r.deleted OR r.mrole IS NULL OR r.mrole = 'viewer' OR NOT r.verified THEN
      outcome := 'refused';
      RETURN NEXT;
    ELSE
      -- May spend: its hold is taken below, with the other calls of the batch.
      v_ords := v_ords || r.i;
      v_rids := v_rids || p_request_ids[r.i];
      v_orgs := v_orgs || r.org;
      v_users := v_users || r.uid;
      v_lo := v_lo || p_min[r.i];
      v_hi := v_hi || p_max[r.i];
      v_ttl := v_ttl || p_ttl_secs[r.i];
      v_tids := v_tids || r.tid;
      v_roles := v_roles || r.mrole;
    END IF;
  END LOOP;

  IF coalesce(array_length(v_ords, 1), 0) = 0 THEN
    RETURN;
  END IF;
  FOR r IN SELECT h.ord AS j, h.take AS held, h.outcome AS result FROM svc_reserve_budgeted(v_rids, v_orgs, v_users, v_tids, v_lo, v_hi, v_ttl) AS h LOOP
    ord := v_ords[r.j];
    token_id := v_tids[r.j];
    user_id := v_users[r.j];
    org_key := v_orgs[r.j];
    role := v_roles[r.j];
    email_verified := true;
    org_deleted := false;
    take := r.held;
    outcome := r.result;
    RETURN NEXT;
  END LOOP;
END;
$$;
