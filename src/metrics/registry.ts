import client from 'prom-client';

// The process's metrics (docs/operations.md § Metrics), in one registry served at GET /metrics. Counters
// and histograms are updated where the event happens (one increment, off the response's path: after
// 'finish' for requests, after the settle for model calls); gauges of state outside the process (the
// pool, holds, leases) are read when Prometheus scrapes (src/metrics/routes.ts).

export const registry = new client.Registry();

// Process metrics: CPU, memory, heap, event-loop lag, handles, GC (prom-client's defaults).
client.collectDefaultMetrics({ register: registry, prefix: 'svc_' });

const registers = [registry];

/** Request durations: most answers take milliseconds; a model stream can take a minute. */
const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export const httpRequests = new client.Counter({
  name: 'svc_http_requests_total',
  help: 'HTTP requests answered, by route template, method and status',
  labelNames: ['route', 'method', 'status'] as const,
  registers,
});

export const httpDuration = new client.Histogram({
  name: 'svc_http_request_duration_seconds',
  help: 'Time from a request to the end of its answer, by route template, method and status',
  labelNames: ['route', 'method', 'status'] as const,
  buckets: DURATION_BUCKETS,
  registers,
});

export const modelCalls = new client.Counter({
  name: 'svc_model_calls_total',
  help: 'Model calls that reached the provider, by outcome (completed, estimated, aborted: settled; failed: voided)',
  labelNames: ['outcome'] as const,
  registers,
});

export const modelCallDuration = new client.Histogram({
  name: 'svc_model_call_duration_seconds',
  help: 'Provider latency: from the call being admitted to its settle, by outcome',
  labelNames: ['outcome'] as const,
  buckets: DURATION_BUCKETS,
  registers,
});

export const modelFirstByte = new client.Histogram({
  name: 'svc_model_first_byte_seconds',
  help: 'Time from the call being admitted to the first byte relayed to the caller',
  buckets: DURATION_BUCKETS,
  registers,
});

export const creditsDebited = new client.Counter({
  name: 'svc_model_credits_debited_total',
  help: 'Credits (tokens) debited by settled model calls',
  registers,
});

export const webhookEvents = new client.Counter({
  name: 'svc_webhook_events_total',
  help: 'Payment processor webhook events accepted, by whether they were a duplicate delivery',
  labelNames: ['duplicate'] as const,
  registers,
});

/** The pool the pool gauge describes (set by the metrics route; none with the embedded database). */
let watchedPool: { totalCount: number; idleCount: number; waitingCount: number } | undefined;
export const watchPool = (pool: typeof watchedPool) => {
  watchedPool = pool;
};

export const poolConnections = new client.Gauge({
  name: 'svc_db_pool_connections',
  help: 'PostgreSQL pool connections by state (in_use, idle) and clients waiting for one (waiting)',
  labelNames: ['state'] as const,
  registers,
  // Read whenever the registry is, so each worker of a cluster reports its own pool as it is now.
  collect() {
    if (!watchedPool) return;
    this.set({ state: 'in_use' }, watchedPool.totalCount - watchedPool.idleCount);
    this.set({ state: 'idle' }, watchedPool.idleCount);
    this.set({ state: 'waiting' }, watchedPool.waitingCount);
  },
});

/** The provider connections the upstream gauge describes (set by the metrics route; none for svc-local). */
let watchedUpstream: { connections?(): { busy: number; idle: number } } | undefined;
export const watchUpstream = (upstream: typeof watchedUpstream) => {
  watchedUpstream = upstream;
};

export const upstreamConnections = new client.Gauge({
  name: 'svc_upstream_connections',
  help: 'Connections to the model provider by state (busy: a call on it; idle: kept alive for the next call)',
  labelNames: ['state'] as const,
  registers,
  collect() {
    const now = watchedUpstream?.connections?.();
    if (!now) return;
    this.set({ state: 'busy' }, now.busy);
    this.set({ state: 'idle' }, now.idle);
  },
});

/** The concurrency limiter the admissions gauge describes (set by the metrics route). */
let watchedLimiter: { waiting?(): number } | undefined;
export const watchLimiter = (limiter: typeof watchedLimiter) => {
  watchedLimiter = limiter;
};

export const admissionsWaiting = new client.Gauge({
  name: 'svc_model_admissions_waiting',
  help: "Model calls and runs waiting in this process for a concurrency slot: for this process's own releases of their organization to land",
  registers,
  collect() {
    const now = watchedLimiter?.waiting?.();
    if (now !== undefined) this.set(now);
  },
});

// State of the whole database, not of one process: read once per scrape by the worker that takes it and
// kept out of the cluster's aggregation (summing N workers' copies of one count would multiply it).
export const stateRegistry = new client.Registry();

export const holdsOutstanding = new client.Gauge({
  name: 'svc_billing_holds_outstanding',
  help: 'Credit holds not yet settled or voided (all processes: read from the database at scrape)',
  registers: [stateRegistry],
});

export const heldCredits = new client.Gauge({
  name: 'svc_billing_held_credits',
  help: 'Credits held by outstanding holds',
  registers: [stateRegistry],
});

export const leasesOutstanding = new client.Gauge({
  name: 'svc_concurrency_leases_outstanding',
  help: 'Concurrency leases not expired, in the database (none when Redis keeps them)',
  registers: [stateRegistry],
});

// Usage a provider reported beyond a call's hold (CONTRACT §8; src/billing/debt.ts chargeExcess): each
// should be rare (the reserve is an upper bound), so any rise is worth an alert.
export const excessCalls = new client.Counter({
  name: 'svc_billing_excess_calls_total',
  help: 'Model calls whose provider reported usage beyond the hold (the excess charged, once per call)',
  registers,
});

export const excessDebitedCredits = new client.Counter({
  name: 'svc_billing_excess_debited_credits_total',
  help: 'Credits of usage beyond the hold debited from the balance the hold was on',
  registers,
});

export const excessDebtCredits = new client.Counter({
  name: 'svc_billing_excess_debt_credits_total',
  help: "Credits of usage beyond the hold that no balance could pay, recorded as the owner's debt",
  registers,
});

// The auto top-up worker's passes (src/billing/auto-topup.ts): rises every AUTO_TOPUP_POLL_MS while the
// worker runs; a count that stops rising is a worker stuck or stopped.
export const autoTopupPasses = new client.Counter({
  name: 'svc_auto_topup_passes_total',
  help: 'Auto top-up worker passes completed by this process (crossings handled, pending charges sent)',
  registers,
});
