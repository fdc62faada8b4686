CREATE TABLE "account_tokens" (
	"id" serial PRIMARY KEY NOT NULL,
	"user_id" text NOT NULL,
	"purpose" text NOT NULL,
	"token_hash" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"used_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "account_tokens_token_hash_unique" UNIQUE("token_hash")
);
--> statement-breakpoint
CREATE TABLE "rate_limits" (
	"key" varchar(255) PRIMARY KEY NOT NULL,
	"points" integer DEFAULT 0 NOT NULL,
	"expire" bigint
);
--> statement-breakpoint
CREATE TABLE "recovery_codes" (
	"id" serial PRIMARY KEY NOT NULL,
	"user_id" text NOT NULL,
	"code_hash" text NOT NULL,
	"used_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "sessions" (
	"id" text PRIMARY KEY NOT NULL,
	"secret_hash" text NOT NULL,
	"user_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"revoked_at" timestamp with time zone,
	CONSTRAINT "sessions_secret_hash_unique" UNIQUE("secret_hash")
);
--> statement-breakpoint
CREATE TABLE "two_factor_challenges" (
	"id" serial PRIMARY KEY NOT NULL,
	"token_hash" text NOT NULL,
	"user_id" text NOT NULL,
	"failed_attempts" integer DEFAULT 0 NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"consumed_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "two_factor_challenges_token_hash_unique" UNIQUE("token_hash")
);
--> statement-breakpoint
CREATE TABLE "used_trial_addresses" (
	"address_hash" text PRIMARY KEY NOT NULL,
	"recorded_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "users" (
	"id" text PRIMARY KEY NOT NULL,
	"email" text NOT NULL,
	"name" text NOT NULL,
	"password_hash" text NOT NULL,
	"email_verified_at" timestamp with time zone,
	"totp_secret_enc" text,
	"totp_enabled_at" timestamp with time zone,
	"totp_last_step" bigint,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"deleted_at" timestamp with time zone,
	CONSTRAINT "users_email_unique" UNIQUE("email")
);
--> statement-breakpoint
CREATE TABLE "memberships" (
	"org_id" text NOT NULL,
	"user_id" text NOT NULL,
	"role" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "memberships_org_id_user_id_pk" PRIMARY KEY("org_id","user_id")
);
--> statement-breakpoint
CREATE TABLE "orgs" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"owner_id" text NOT NULL,
	"is_default" boolean DEFAULT false NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"deleted_at" timestamp with time zone,
	"rpm_limit" integer,
	"tpm_limit" integer
);
--> statement-breakpoint
CREATE TABLE "api_tokens" (
	"id" serial PRIMARY KEY NOT NULL,
	"user_id" text NOT NULL,
	"org_id" text NOT NULL,
	"token_name" text NOT NULL,
	"token_hash" text NOT NULL,
	"token_prefix" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_used_at" timestamp with time zone,
	"revoked_at" timestamp with time zone,
	"expires_at" timestamp with time zone,
	"expiry_seen_at" timestamp with time zone,
	"scopes" text[] DEFAULT '{model,account}'::text[] NOT NULL,
	"rpm_limit" integer,
	"tpm_limit" integer
);
--> statement-breakpoint
CREATE TABLE "mail_outbox" (
	"id" serial PRIMARY KEY NOT NULL,
	"to" text NOT NULL,
	"subject" text NOT NULL,
	"text" text NOT NULL,
	"html" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "server_secrets" (
	"name" text PRIMARY KEY NOT NULL,
	"value" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "svc_processes" (
	"tag" text PRIMARY KEY NOT NULL,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL,
	"beat_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "device_codes" (
	"id" serial PRIMARY KEY NOT NULL,
	"device_code_hash" text NOT NULL,
	"user_code_hash" text NOT NULL,
	"flow" text NOT NULL,
	"oauth_client_id" text,
	"resources" text[],
	"scope" text,
	"issuer" text,
	"all_orgs" boolean DEFAULT false NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"user_id" text,
	"org_id" text,
	"interval_seconds" integer NOT NULL,
	"last_polled_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"decided_at" timestamp with time zone,
	"consumed_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "billing_accounts" (
	"id" text PRIMARY KEY NOT NULL,
	"kind" text NOT NULL,
	"user_id" text,
	"org_key" text,
	"balance" bigint DEFAULT 0 NOT NULL,
	"held" bigint DEFAULT 0 NOT NULL,
	"allocation" bigint DEFAULT 0 NOT NULL,
	"watch_thresholds" bigint[],
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "billing_accounts_inside_non_negative" CHECK ("billing_accounts"."kind" not in ('org', 'pool') or ("billing_accounts"."held" >= 0 and "billing_accounts"."balance" >= "billing_accounts"."held")),
	CONSTRAINT "billing_accounts_held_only_inside" CHECK ("billing_accounts"."kind" in ('org', 'pool') or "billing_accounts"."held" = 0)
);
--> statement-breakpoint
CREATE TABLE "billing_checkout_sessions" (
	"id" text PRIMARY KEY NOT NULL,
	"org_key" text NOT NULL,
	"customer_id" text NOT NULL,
	"kind" text NOT NULL,
	"credits" bigint DEFAULT 0 NOT NULL,
	"amount_cents" integer DEFAULT 0 NOT NULL,
	"status" text DEFAULT 'open' NOT NULL,
	"success_url" text NOT NULL,
	"cancel_url" text NOT NULL,
	"created_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "billing_customers" (
	"org_key" text PRIMARY KEY NOT NULL,
	"customer_id" text NOT NULL,
	"email" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "billing_customers_customer_id_unique" UNIQUE("customer_id")
);
--> statement-breakpoint
CREATE TABLE "billing_disputes" (
	"id" text PRIMARY KEY NOT NULL,
	"payment_intent" text NOT NULL,
	"charge_id" text,
	"amount_cents" bigint NOT NULL,
	"processor_status" text NOT NULL,
	"status_event_created" bigint DEFAULT 0 NOT NULL,
	"state" text NOT NULL,
	"credits" bigint DEFAULT 0 NOT NULL,
	"from_client" bigint DEFAULT 0 NOT NULL,
	"from_pool" bigint DEFAULT 0 NOT NULL,
	"shortfall" bigint DEFAULT 0 NOT NULL,
	"reversed_cents" bigint DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"withdrawn_at" timestamp with time zone,
	"reinstated_at" timestamp with time zone,
	CONSTRAINT "billing_disputes_split" CHECK ("billing_disputes"."credits" = "billing_disputes"."from_client" + "billing_disputes"."from_pool" + "billing_disputes"."shortfall")
);
--> statement-breakpoint
CREATE TABLE "billing_entries" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"key" text NOT NULL,
	"from_account" text NOT NULL,
	"to_account" text NOT NULL,
	"amount" bigint NOT NULL,
	"type" text NOT NULL,
	"org_key" text,
	"org_amount" bigint,
	"org_balance_after" bigint,
	"description" text DEFAULT '' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "billing_entries_key_unique" UNIQUE("key"),
	CONSTRAINT "billing_entries_positive" CHECK ("billing_entries"."amount" > 0),
	CONSTRAINT "billing_entries_two_accounts" CHECK ("billing_entries"."from_account" <> "billing_entries"."to_account")
);
--> statement-breakpoint
CREATE TABLE "billing_holds" (
	"request_id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"org_key" text NOT NULL,
	"user_id" text,
	"amount" bigint NOT NULL,
	"status" text DEFAULT 'held' NOT NULL,
	"debited" bigint DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"closed_at" timestamp with time zone,
	"budgeted" boolean DEFAULT false NOT NULL,
	CONSTRAINT "billing_holds_amounts" CHECK ("billing_holds"."amount" >= 0 and "billing_holds"."debited" >= 0)
);
--> statement-breakpoint
CREATE TABLE "billing_invoices" (
	"id" text PRIMARY KEY NOT NULL,
	"org_key" text NOT NULL,
	"customer_id" text NOT NULL,
	"subscription_id" text,
	"billing_reason" text,
	"amount_due_cents" integer NOT NULL,
	"amount_paid_cents" integer NOT NULL,
	"status" text NOT NULL,
	"currency" text NOT NULL,
	"invoice_pdf" text,
	"created_at_unix" bigint NOT NULL,
	"due_date" bigint,
	"payment_intent" text,
	"payment_failed_at" timestamp with time zone,
	"event_created" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "billing_payment_methods" (
	"id" text PRIMARY KEY NOT NULL,
	"customer_id" text NOT NULL,
	"brand" text NOT NULL,
	"last4" text NOT NULL,
	"exp_month" integer NOT NULL,
	"exp_year" integer NOT NULL,
	"is_default" boolean DEFAULT true NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "billing_payments" (
	"payment_intent" text PRIMARY KEY NOT NULL,
	"grant_key" text,
	"invoice_id" text,
	"org_key" text,
	"owner_id" text,
	"credits" bigint DEFAULT 0 NOT NULL,
	"amount_cents" bigint DEFAULT 0 NOT NULL,
	"refunded_cents" bigint DEFAULT 0 NOT NULL,
	"refunded_credits" bigint DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "billing_refunds" (
	"id" text PRIMARY KEY NOT NULL,
	"payment_intent" text NOT NULL,
	"amount_cents" bigint NOT NULL,
	"status" text NOT NULL,
	"credits" bigint DEFAULT 0 NOT NULL,
	"from_client" bigint DEFAULT 0 NOT NULL,
	"from_pool" bigint DEFAULT 0 NOT NULL,
	"shortfall" bigint DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"applied_at" timestamp with time zone,
	CONSTRAINT "billing_refunds_split" CHECK ("billing_refunds"."credits" = "billing_refunds"."from_client" + "billing_refunds"."from_pool" + "billing_refunds"."shortfall")
);
--> statement-breakpoint
CREATE TABLE "billing_subscriptions" (
	"id" text PRIMARY KEY NOT NULL,
	"org_key" text NOT NULL,
	"customer_id" text NOT NULL,
	"plan_name" text DEFAULT 'pro' NOT NULL,
	"status" text NOT NULL,
	"current_period_start" bigint,
	"current_period_end" bigint,
	"cancel_at_period_end" boolean DEFAULT false NOT NULL,
	"event_created" bigint DEFAULT 0 NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "billing_webhook_events" (
	"id" text PRIMARY KEY NOT NULL,
	"type" text NOT NULL,
	"outcome" text NOT NULL,
	"processed_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "oauth_clients" (
	"client_id" text PRIMARY KEY NOT NULL,
	"source" text NOT NULL,
	"client_name" text,
	"client_uri" text,
	"redirect_uris" jsonb NOT NULL,
	"grant_types" jsonb NOT NULL,
	"token_endpoint_auth_method" text NOT NULL,
	"client_secret_hash" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"fetched_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "oauth_codes" (
	"code_hash" text PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"user_id" text NOT NULL,
	"org" text NOT NULL,
	"redirect_uri" text NOT NULL,
	"code_challenge" text NOT NULL,
	"resources" jsonb NOT NULL,
	"issuer" text NOT NULL,
	"all_orgs" boolean DEFAULT false NOT NULL,
	"scope" text,
	"expires_at" timestamp with time zone NOT NULL,
	"used_at" timestamp with time zone,
	"grant_ids" jsonb
);
--> statement-breakpoint
CREATE TABLE "oauth_grants" (
	"id" text PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"user_id" text NOT NULL,
	"org" text NOT NULL,
	"resource" text NOT NULL,
	"scope" text NOT NULL,
	"issuer" text NOT NULL,
	"all_orgs" boolean DEFAULT false NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "oauth_refresh_tokens" (
	"token_hash" text PRIMARY KEY NOT NULL,
	"grant_id" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"rotated_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "oauth_signing_keys" (
	"kid" text PRIMARY KEY NOT NULL,
	"private_jwk_enc" text NOT NULL,
	"public_jwk" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"retired_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "project_files" (
	"id" text PRIMARY KEY NOT NULL,
	"project_id" text NOT NULL,
	"path" text NOT NULL,
	"media_type" text NOT NULL,
	"size" integer NOT NULL,
	"sha256" text NOT NULL,
	"content" "bytea" NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "project_reports" (
	"id" text PRIMARY KEY NOT NULL,
	"project_id" text NOT NULL,
	"title" text NOT NULL,
	"body" text DEFAULT '' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "project_shares" (
	"id" text PRIMARY KEY NOT NULL,
	"project_id" text NOT NULL,
	"kind" text NOT NULL,
	"user_id" text,
	"role" text NOT NULL,
	"token_hash" text,
	"created_by" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "projects" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"name" text NOT NULL,
	"description" text,
	"brief" text DEFAULT '' NOT NULL,
	"created_by" text,
	"forked_from_id" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "concurrency_leases" (
	"org_id" text NOT NULL,
	"slot" integer NOT NULL,
	"lease_id" text NOT NULL,
	"kind" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"acquired_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "concurrency_leases_org_id_slot_pk" PRIMARY KEY("org_id","slot")
);
--> statement-breakpoint
CREATE TABLE "usage_records" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"request_id" text NOT NULL,
	"org_key" text NOT NULL,
	"user_id" text NOT NULL,
	"api_token_id" bigint,
	"oauth_grant_id" text,
	"oauth_client_id" text,
	"source" text NOT NULL,
	"run_id" text,
	"model" text NOT NULL,
	"prompt_tokens" integer NOT NULL,
	"completion_tokens" integer NOT NULL,
	"cached_prompt_tokens" integer DEFAULT 0 NOT NULL,
	"cost_cents" numeric NOT NULL,
	"credits_debited" bigint NOT NULL,
	"duration_ms" integer NOT NULL,
	"outcome" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "usage_records_request_id_unique" UNIQUE("request_id"),
	CONSTRAINT "usage_records_amounts" CHECK ("usage_records"."credits_debited" >= 0)
);
--> statement-breakpoint
CREATE TABLE "usage_rollup" (
	"org_key" text NOT NULL,
	"hour" timestamp with time zone NOT NULL,
	"user_id" text NOT NULL,
	"credential" text NOT NULL,
	"model" text NOT NULL,
	"api_token_id" bigint,
	"oauth_client_id" text,
	"calls" bigint NOT NULL,
	"prompt_tokens" bigint NOT NULL,
	"completion_tokens" bigint NOT NULL,
	"cached_prompt_tokens" bigint NOT NULL,
	"credits_debited" bigint NOT NULL,
	"cost_cents" numeric NOT NULL,
	CONSTRAINT "usage_rollup_pkey" PRIMARY KEY("org_key","hour","user_id","credential","model")
);
--> statement-breakpoint
CREATE TABLE "org_invitations" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"email" text NOT NULL,
	"role" text NOT NULL,
	"token_hash" text NOT NULL,
	"invited_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"accepted_at" timestamp with time zone,
	"accepted_by" text,
	"revoked_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "billing_reconcile_checkpoint" (
	"id" integer PRIMARY KEY DEFAULT 1 NOT NULL,
	"last_entry_id" bigint NOT NULL,
	"last_usage_record_id" bigint NOT NULL,
	"ledger_checksum" numeric NOT NULL,
	"checksum_seed" bigint NOT NULL,
	"taken_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "billing_reconcile_checkpoint_one_row" CHECK ("billing_reconcile_checkpoint"."id" = 1)
);
--> statement-breakpoint
CREATE TABLE "balance_crossings" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"org_key" text NOT NULL,
	"purpose" text NOT NULL,
	"threshold" bigint NOT NULL,
	"balance_before" bigint NOT NULL,
	"balance_after" bigint NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"handled_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "balance_watches" (
	"org_key" text NOT NULL,
	"purpose" text NOT NULL,
	"threshold" bigint NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "balance_watches_org_key_purpose_pk" PRIMARY KEY("org_key","purpose")
);
--> statement-breakpoint
CREATE TABLE "outbound_events" (
	"id" text PRIMARY KEY NOT NULL,
	"org_key" text NOT NULL,
	"type" text NOT NULL,
	"data" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "webhook_deliveries" (
	"id" serial PRIMARY KEY NOT NULL,
	"event_id" text NOT NULL,
	"endpoint_id" text NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_attempt_at" timestamp with time zone,
	"last_status" integer,
	"last_error" text,
	"delivered_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "webhook_deliveries_event_endpoint" UNIQUE("event_id","endpoint_id")
);
--> statement-breakpoint
CREATE TABLE "webhook_endpoints" (
	"id" text PRIMARY KEY NOT NULL,
	"org_key" text NOT NULL,
	"url" text NOT NULL,
	"events" text[] NOT NULL,
	"secret_sealed" text NOT NULL,
	"reveal_session" text,
	"reveal_until" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "member_budget_holds" (
	"request_id" text NOT NULL,
	"usage_id" bigint NOT NULL,
	CONSTRAINT "member_budget_holds_request_id_usage_id_pk" PRIMARY KEY("request_id","usage_id")
);
--> statement-breakpoint
CREATE TABLE "member_budget_returns" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"usage_id" bigint NOT NULL,
	"amount" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "member_budget_usage" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"budget_id" bigint NOT NULL,
	"period_start" timestamp with time zone NOT NULL,
	"used" bigint DEFAULT 0 NOT NULL,
	"exhausted_at" timestamp with time zone,
	CONSTRAINT "member_budget_usage_used" CHECK ("member_budget_usage"."used" >= 0)
);
--> statement-breakpoint
CREATE TABLE "member_budgets" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"org_key" text NOT NULL,
	"user_id" text NOT NULL,
	"api_token_id" integer,
	"period" text NOT NULL,
	"limit_credits" bigint NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"cleared_at" timestamp with time zone,
	CONSTRAINT "member_budgets_limit" CHECK ("member_budgets"."limit_credits" >= 0)
);
--> statement-breakpoint
CREATE TABLE "auto_topup_charges" (
	"id" text PRIMARY KEY NOT NULL,
	"org_key" text NOT NULL,
	"crossing_id" bigint NOT NULL,
	"customer_id" text,
	"amount_cents" integer NOT NULL,
	"payment_intent" text,
	"status" text DEFAULT 'pending' NOT NULL,
	"failure" text,
	"attempts" integer DEFAULT 0 NOT NULL,
	"claimed_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "auto_topup_charges_crossing_id_unique" UNIQUE("crossing_id"),
	CONSTRAINT "auto_topup_charges_payment_intent_unique" UNIQUE("payment_intent")
);
--> statement-breakpoint
CREATE TABLE "auto_topups" (
	"org_key" text PRIMARY KEY NOT NULL,
	"enabled" boolean DEFAULT true NOT NULL,
	"trigger_credits" bigint NOT NULL,
	"amount_cents" integer NOT NULL,
	"monthly_cap_cents" integer NOT NULL,
	"disabled_reason" text,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "auto_topups_amounts" CHECK ("auto_topups"."trigger_credits" >= 0 and "auto_topups"."amount_cents" > 0 and "auto_topups"."monthly_cap_cents" >= 0)
);
--> statement-breakpoint
CREATE TABLE "stored_responses" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"user_id" text NOT NULL,
	"messages" jsonb NOT NULL,
	"response" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "service_accounts" (
	"id" text PRIMARY KEY NOT NULL,
	"org_id" text NOT NULL,
	"name" text NOT NULL,
	"created_by" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"deleted_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "audit_events" (
	"id" text PRIMARY KEY NOT NULL,
	"chain" text NOT NULL,
	"seq" bigint NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"action" text NOT NULL,
	"actor_type" text NOT NULL,
	"actor_id" text,
	"actor_email" text,
	"credential_id" text,
	"ip" text,
	"user_agent" text,
	"target_type" text NOT NULL,
	"target_id" text,
	"details" jsonb NOT NULL,
	"prev_hash" text NOT NULL,
	"hash" text NOT NULL
);
--> statement-breakpoint
ALTER TABLE "account_tokens" ADD CONSTRAINT "account_tokens_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "recovery_codes" ADD CONSTRAINT "recovery_codes_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sessions" ADD CONSTRAINT "sessions_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "two_factor_challenges" ADD CONSTRAINT "two_factor_challenges_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memberships" ADD CONSTRAINT "memberships_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "memberships" ADD CONSTRAINT "memberships_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "orgs" ADD CONSTRAINT "orgs_owner_id_users_id_fk" FOREIGN KEY ("owner_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "api_tokens" ADD CONSTRAINT "api_tokens_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "api_tokens" ADD CONSTRAINT "api_tokens_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "device_codes" ADD CONSTRAINT "device_codes_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "device_codes" ADD CONSTRAINT "device_codes_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "oauth_codes" ADD CONSTRAINT "oauth_codes_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "oauth_codes" ADD CONSTRAINT "oauth_codes_org_orgs_id_fk" FOREIGN KEY ("org") REFERENCES "public"."orgs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "oauth_grants" ADD CONSTRAINT "oauth_grants_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "oauth_grants" ADD CONSTRAINT "oauth_grants_org_orgs_id_fk" FOREIGN KEY ("org") REFERENCES "public"."orgs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "oauth_refresh_tokens" ADD CONSTRAINT "oauth_refresh_tokens_grant_id_oauth_grants_id_fk" FOREIGN KEY ("grant_id") REFERENCES "public"."oauth_grants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "project_files" ADD CONSTRAINT "project_files_project_id_projects_id_fk" FOREIGN KEY ("project_id") REFERENCES "public"."projects"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "project_reports" ADD CONSTRAINT "project_reports_project_id_projects_id_fk" FOREIGN KEY ("project_id") REFERENCES "public"."projects"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "project_shares" ADD CONSTRAINT "project_shares_project_id_projects_id_fk" FOREIGN KEY ("project_id") REFERENCES "public"."projects"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "project_shares" ADD CONSTRAINT "project_shares_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "project_shares" ADD CONSTRAINT "project_shares_created_by_users_id_fk" FOREIGN KEY ("created_by") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "projects" ADD CONSTRAINT "projects_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "projects" ADD CONSTRAINT "projects_created_by_users_id_fk" FOREIGN KEY ("created_by") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "org_invitations" ADD CONSTRAINT "org_invitations_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "org_invitations" ADD CONSTRAINT "org_invitations_invited_by_users_id_fk" FOREIGN KEY ("invited_by") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "org_invitations" ADD CONSTRAINT "org_invitations_accepted_by_users_id_fk" FOREIGN KEY ("accepted_by") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_event_id_outbound_events_id_fk" FOREIGN KEY ("event_id") REFERENCES "public"."outbound_events"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_endpoint_id_webhook_endpoints_id_fk" FOREIGN KEY ("endpoint_id") REFERENCES "public"."webhook_endpoints"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "stored_responses" ADD CONSTRAINT "stored_responses_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "service_accounts" ADD CONSTRAINT "service_accounts_id_users_id_fk" FOREIGN KEY ("id") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "service_accounts" ADD CONSTRAINT "service_accounts_org_id_orgs_id_fk" FOREIGN KEY ("org_id") REFERENCES "public"."orgs"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "service_accounts" ADD CONSTRAINT "service_accounts_created_by_users_id_fk" FOREIGN KEY ("created_by") REFERENCES "public"."users"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "account_tokens_user_idx" ON "account_tokens" USING btree ("user_id","purpose");--> statement-breakpoint
CREATE UNIQUE INDEX "recovery_codes_user_code_idx" ON "recovery_codes" USING btree ("user_id","code_hash");--> statement-breakpoint
CREATE INDEX "sessions_user_live_idx" ON "sessions" USING btree ("user_id") WHERE "sessions"."revoked_at" is null;--> statement-breakpoint
CREATE INDEX "memberships_user_idx" ON "memberships" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "memberships_org_time_idx" ON "memberships" USING btree ("org_id","created_at","user_id");--> statement-breakpoint
CREATE UNIQUE INDEX "orgs_one_default_per_owner" ON "orgs" USING btree ("owner_id") WHERE "orgs"."is_default";--> statement-breakpoint
CREATE INDEX "orgs_owner_idx" ON "orgs" USING btree ("owner_id");--> statement-breakpoint
CREATE UNIQUE INDEX "api_tokens_hash_idx" ON "api_tokens" USING btree ("token_hash");--> statement-breakpoint
CREATE UNIQUE INDEX "api_tokens_one_active_per_org_user" ON "api_tokens" USING btree ("org_id","user_id") WHERE "api_tokens"."revoked_at" is null;--> statement-breakpoint
CREATE INDEX "api_tokens_org_idx" ON "api_tokens" USING btree ("org_id","user_id");--> statement-breakpoint
CREATE INDEX "api_tokens_expiry_due_idx" ON "api_tokens" USING btree ("expires_at") WHERE "api_tokens"."expires_at" is not null and "api_tokens"."expiry_seen_at" is null;--> statement-breakpoint
CREATE INDEX "api_tokens_user_idx" ON "api_tokens" USING btree ("user_id",("revoked_at" is not null),"id" DESC NULLS FIRST);--> statement-breakpoint
CREATE INDEX "mail_outbox_to_idx" ON "mail_outbox" USING btree ("to","created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "device_codes_device_code_idx" ON "device_codes" USING btree ("device_code_hash");--> statement-breakpoint
CREATE UNIQUE INDEX "device_codes_user_code_idx" ON "device_codes" USING btree ("user_code_hash");--> statement-breakpoint
CREATE INDEX "device_codes_expires_idx" ON "device_codes" USING btree ("expires_at");--> statement-breakpoint
CREATE INDEX "billing_accounts_user_idx" ON "billing_accounts" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "billing_checkout_sessions_org_idx" ON "billing_checkout_sessions" USING btree ("org_key");--> statement-breakpoint
CREATE INDEX "billing_disputes_payment_idx" ON "billing_disputes" USING btree ("payment_intent");--> statement-breakpoint
CREATE INDEX "billing_entries_org_shown_idx" ON "billing_entries" USING btree ("org_key",(-"id")) WHERE "billing_entries"."type" in ('trial', 'subscription_credit', 'topup', 'usage', 'refund');--> statement-breakpoint
CREATE INDEX "billing_entries_org_moves_idx" ON "billing_entries" USING btree ("org_key",(-"id")) WHERE "billing_entries"."type" in ('allocate', 'reclaim');--> statement-breakpoint
CREATE INDEX "billing_entries_grants_idx" ON "billing_entries" USING btree ("to_account") WHERE "billing_entries"."from_account" like 'src:%';--> statement-breakpoint
CREATE INDEX "billing_holds_open_idx" ON "billing_holds" USING btree ("account_id","expires_at") WHERE "billing_holds"."status" = 'held';--> statement-breakpoint
CREATE INDEX "billing_holds_closed_idx" ON "billing_holds" USING btree ("closed_at") WHERE "billing_holds"."status" <> 'held';--> statement-breakpoint
CREATE INDEX "billing_invoices_org_idx" ON "billing_invoices" USING btree ("org_key","created_at_unix","id");--> statement-breakpoint
CREATE INDEX "billing_payments_invoice_idx" ON "billing_payments" USING btree ("invoice_id");--> statement-breakpoint
CREATE INDEX "billing_refunds_payment_idx" ON "billing_refunds" USING btree ("payment_intent");--> statement-breakpoint
CREATE INDEX "billing_subscriptions_org_idx" ON "billing_subscriptions" USING btree ("org_key");--> statement-breakpoint
CREATE INDEX "oauth_grants_org_user_live_idx" ON "oauth_grants" USING btree ("org","user_id") WHERE "oauth_grants"."revoked_at" is null;--> statement-breakpoint
CREATE INDEX "oauth_refresh_tokens_grant_idx" ON "oauth_refresh_tokens" USING btree ("grant_id");--> statement-breakpoint
CREATE UNIQUE INDEX "project_files_path_idx" ON "project_files" USING btree ("project_id","path");--> statement-breakpoint
CREATE INDEX "project_reports_project_idx" ON "project_reports" USING btree ("project_id","created_at","id");--> statement-breakpoint
CREATE INDEX "project_shares_project_idx" ON "project_shares" USING btree ("project_id");--> statement-breakpoint
CREATE UNIQUE INDEX "project_shares_token_idx" ON "project_shares" USING btree ("token_hash");--> statement-breakpoint
CREATE UNIQUE INDEX "project_shares_one_per_user" ON "project_shares" USING btree ("project_id","user_id") WHERE "project_shares"."kind" = 'user' and "project_shares"."revoked_at" is null;--> statement-breakpoint
CREATE INDEX "project_shares_user_idx" ON "project_shares" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "projects_org_idx" ON "projects" USING btree ("org_id","created_at","id");--> statement-breakpoint
CREATE INDEX "concurrency_leases_lease_idx" ON "concurrency_leases" USING btree ("lease_id");--> statement-breakpoint
CREATE INDEX "usage_records_org_time_idx" ON "usage_records" USING btree ("org_key","created_at");--> statement-breakpoint
CREATE INDEX "usage_records_org_id_idx" ON "usage_records" USING btree ("org_key",(-"id"));--> statement-breakpoint
CREATE INDEX "usage_rollup_credential_idx" ON "usage_rollup" USING btree ("credential","hour");--> statement-breakpoint
CREATE UNIQUE INDEX "org_invitations_token_idx" ON "org_invitations" USING btree ("token_hash");--> statement-breakpoint
CREATE UNIQUE INDEX "org_invitations_one_open_per_email" ON "org_invitations" USING btree ("org_id","email") WHERE "org_invitations"."accepted_at" is null and "org_invitations"."revoked_at" is null;--> statement-breakpoint
CREATE INDEX "org_invitations_org_idx" ON "org_invitations" USING btree ("org_id","created_at","id");--> statement-breakpoint
CREATE INDEX "balance_crossings_pending_idx" ON "balance_crossings" USING btree ("purpose","id") WHERE "balance_crossings"."handled_at" is null;--> statement-breakpoint
CREATE INDEX "balance_crossings_org_idx" ON "balance_crossings" USING btree ("org_key","id");--> statement-breakpoint
CREATE INDEX "outbound_events_org_idx" ON "outbound_events" USING btree ("org_key","created_at");--> statement-breakpoint
CREATE INDEX "webhook_deliveries_due_idx" ON "webhook_deliveries" USING btree ("next_attempt_at") WHERE "webhook_deliveries"."status" = 'pending';--> statement-breakpoint
CREATE INDEX "webhook_deliveries_endpoint_idx" ON "webhook_deliveries" USING btree ("endpoint_id",(-"id"));--> statement-breakpoint
CREATE INDEX "webhook_endpoints_org_idx" ON "webhook_endpoints" USING btree ("org_key","created_at");--> statement-breakpoint
CREATE INDEX "member_budget_returns_usage_idx" ON "member_budget_returns" USING btree ("usage_id");--> statement-breakpoint
CREATE UNIQUE INDEX "member_budget_usage_period_uq" ON "member_budget_usage" USING btree ("budget_id","period_start");--> statement-breakpoint
CREATE UNIQUE INDEX "member_budgets_member_uq" ON "member_budgets" USING btree ("org_key","user_id") WHERE "member_budgets"."api_token_id" is null;--> statement-breakpoint
CREATE UNIQUE INDEX "member_budgets_token_uq" ON "member_budgets" USING btree ("api_token_id") WHERE "member_budgets"."api_token_id" is not null;--> statement-breakpoint
CREATE INDEX "member_budgets_org_idx" ON "member_budgets" USING btree ("org_key");--> statement-breakpoint
CREATE INDEX "auto_topup_charges_org_idx" ON "auto_topup_charges" USING btree ("org_key","created_at");--> statement-breakpoint
CREATE INDEX "stored_responses_org_expiry_idx" ON "stored_responses" USING btree ("org_id","expires_at");--> statement-breakpoint
CREATE INDEX "service_accounts_org_idx" ON "service_accounts" USING btree ("org_id","created_at");--> statement-breakpoint
CREATE UNIQUE INDEX "audit_events_chain_seq_idx" ON "audit_events" USING btree ("chain","seq");--> statement-breakpoint
CREATE INDEX "audit_events_chain_action_idx" ON "audit_events" USING btree ("chain","action","seq");--> statement-breakpoint
CREATE INDEX "audit_events_chain_actor_idx" ON "audit_events" USING btree ("chain","actor_id","seq");--> statement-breakpoint
CREATE INDEX "audit_events_chain_time_idx" ON "audit_events" USING btree ("chain","created_at","seq");