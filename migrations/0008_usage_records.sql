-- Usage records (src/db/tables/usage.ts), written by the statement that settles the calls: no statement
-- of its own on a call's path. Input i's record is p_usage->(i-1) (a JSON object, or null for none), for
-- the inputs that settled (p_settled[i]) with p_debited[i] tokens debited. The cost is worked out here in
-- exact decimal arithmetic (CONTRACT §9: prompt × MODEL_PRICE_INPUT / 1e6 + completion ×
-- MODEL_PRICE_OUTPUT / 1e6, its cached prompt tokens at MODEL_PRICE_CACHED_INPUT instead)
-- from the prices the call was priced with. A record without the cached fields (a settle spooled by an
-- older version) has no cached tokens. A request id is recorded once.
--
-- The same statement adds what it recorded to usage_rollup (the records summed per UTC hour, member,
-- credential and model: the usage API's totals read it, docs/usage.md "The rollup"). Only rows this
-- statement inserted are added (RETURNING skips a repeated request id), so a replayed settle counts once.
-- Rollup rows are updated in key order, so two settles never wait on each other's rows crosswise.
--
-- PL/pgSQL, not SQL: a SQL function's body is parsed and planned again at every call, a PL/pgSQL
-- statement once per connection (its plan is kept). This one runs inside every settle; as SQL it was the
-- settle's largest part (A/B in docs/decisions/0013-usage-record-in-plpgsql.md: 0.91–1.05 ms → 0.30–0.37 ms of
-- PostgreSQL time per settle).
CREATE OR REPLACE FUNCTION svc_record_usage(
  p_request_ids text[], p_usage jsonb, p_debited bigint[], p_settled boolean[]
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  WITH recorded AS (
  INSERT INTO usage_records (request_id, org_key, user_id, api_token_id, oauth_grant_id, oauth_client_id,
      source, run_id, model, prompt_tokens, completion_tokens, cached_prompt_tokens, cost_cents, credits_debited, duration_ms, outcome)
  SELECT p_request_ids[u.i], u.r->>'org', u.r->>'user', (u.r->>'api_token_id')::bigint, u.r->>'oauth_grant_id',
      u.r->>'oauth_client_id', u.r->>'source', u.r->>'run_id', u.r->>'model',
      (u.r->>'prompt_tokens')::int, (u.r->>'completion_tokens')::int, coalesce((u.r->>'cached_prompt_tokens')::int, 0),
      (((u.r->>'prompt_tokens')::numeric - coalesce((u.r->>'cached_prompt_tokens')::numeric, 0)) * (u.r->>'price_input')::numeric
        + coalesce((u.r->>'cached_prompt_tokens')::numeric, 0)
          * coalesce((u.r->>'price_cached_input')::numeric, (u.r->>'price_input')::numeric)
        + (u.r->>'completion_tokens')::numeric * (u.r->>'price_output')::numeric) / 1000000,
      p_debited[u.i], (u.r->>'duration_ms')::int, u.r->>'outcome'
  FROM jsonb_array_elements(coalesce(p_usage, '[]'::jsonb)) WITH ORDINALITY AS u(r, i)
  WHERE jsonb_typeof(u.r) = 'object' AND p_settled[u.i]
  ON CONFLICT (request_id) DO NOTHING
  RETURNING org_key, created_at, user_id, api_token_id, oauth_grant_id, oauth_client_id, model,
      prompt_tokens, completion_tokens, cached_prompt_tokens, credits_debited, cost_cents
  )
  INSERT INTO usage_rollup AS r (org_key, hour, user_id, credential, model, api_token_id, oauth_client_id,
      calls, prompt_tokens, completion_tokens, cached_prompt_tokens, credits_debited, cost_cents)
  SELECT org_key, date_trunc('hour', created_at, 'UTC'), user_id,
      -- The usage API's credential key (src/usage/service.ts CREDENTIAL_KEY): the same expression.
      CASE WHEN api_token_id IS NOT NULL THEN 'token:' || api_token_id ELSE 'grant:' || coalesce(oauth_grant_id, '') END,
      model, max(api_token_id), max(oauth_client_id), count(*), sum(prompt_tokens), sum(completion_tokens),
      sum(cached_prompt_tokens), sum(credits_debited), sum(cost_cents)
  FROM recorded
  GROUP BY 1, 2, 3, 4, 5
  ORDER BY 1, 2, 3, 4, 5
  ON CONFLICT (org_key, hour, user_id, credential, model) DO UPDATE SET
    calls = r.calls + excluded.calls,
    prompt_tokens = r.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = r.completion_tokens + excluded.completion_tokens,
    cached_prompt_tokens = r.cached_prompt_tokens + excluded.cached_prompt_tokens,
    credits_debited = r.credits_debited + excluded.credits_debited,
    cost_cents = r.cost_cents + excluded.cost_cents;
END;
$$;
