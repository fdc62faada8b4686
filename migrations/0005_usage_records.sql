-- Usage records (src/db/tables/usage.ts), written by the statement that settles the calls: no statement
-- of its own on a call's path. Input i's record is p_usage->(i-1) (a JSON object, or null for none), for
-- the inputs that settled (p_settled[i]) with p_debited[i] tokens debited. The cost is worked out here in
-- exact decimal arithmetic (CONTRACT §9: prompt × MODEL_PRICE_INPUT / 1e6 + completion ×
-- MODEL_PRICE_OUTPUT / 1e6, its cached prompt tokens at MODEL_PRICE_CACHED_INPUT instead: issue 19 item 4)
-- from the prices the call was priced with. A record without the cached fields (a settle spooled by an
-- older version) has no cached tokens. A request id is recorded once.
CREATE OR REPLACE FUNCTION svc_record_usage(
  p_request_ids text[], p_usage jsonb, p_debited bigint[], p_settled boolean[]
) RETURNS void LANGUAGE sql AS $$
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
  ON CONFLICT (request_id) DO NOTHING;
$$;
