import cluster from 'node:cluster';
import { randomUUID } from 'node:crypto';
import client from 'prom-client';
import { registry } from './registry.js';

// /metrics under WEB_CONCURRENCY > 1 (src/cluster.ts). Whichever worker takes a scrape answers for all of
// them: it asks the primary, which gathers every worker's registry over the cluster's IPC channel and
// aggregates it with prom-client's AggregatorRegistry (counters and histograms summed, so a counter never
// jumps between workers' values from one scrape to the next). The database-wide gauges are not in that
// registry: the scraping worker reads them once and appends them (src/metrics/routes.ts).

const REQUEST = 'svc:metrics-request';
const REPLY = 'svc:metrics-reply';
/** The aggregator gives up on a silent worker after 5 s; the asking worker waits a little longer. */
const REPLY_WAIT_MS = 6_000;

interface Reply {
  type: typeof REPLY;
  id: string;
  text?: string;
  error?: string;
}

const isMessage = <T extends { type: string }>(msg: unknown, type: T['type']): msg is T =>
  !!msg && typeof msg === 'object' && (msg as { type?: unknown }).type === type;

/** True in a worker of a cluster (a single process answers from its own registry). */
export const inCluster = (): boolean => cluster.isWorker;

/** In the primary: answer workers' requests with the whole cluster's metrics. */
export function serveClusterMetrics(): void {
  const aggregator = new client.AggregatorRegistry();
  cluster.on('message', (worker, msg: unknown) => {
    if (!isMessage<{ type: typeof REQUEST; id: string }>(msg, REQUEST)) return;
    aggregator.clusterMetrics().then(
      (text) => worker.send({ type: REPLY, id: msg.id, text } satisfies Reply),
      (err: Error) => worker.send({ type: REPLY, id: msg.id, error: err.message } satisfies Reply),
    );
  });
}

/** In a worker: answer the primary's gathering with this process's registry (done once, at start). */
export function joinClusterMetrics(): void {
  // Constructing an AggregatorRegistry is what installs prom-client's worker-side listener.
  new client.AggregatorRegistry();
  client.AggregatorRegistry.setRegistries([registry]);
}

/** In a worker: every worker's metrics, aggregated by the primary, in the Prometheus text format. */
export function clusterMetricsText(): Promise<string> {
  const id = randomUUID();
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      process.off('message', onMessage);
      reject(new Error('the cluster primary did not answer the metrics request'));
    }, REPLY_WAIT_MS);
    function onMessage(msg: unknown) {
      if (!isMessage<Reply>(msg, REPLY) || msg.id !== id) return;
      clearTimeout(timer);
      process.off('message', onMessage);
      if (msg.text !== undefined) resolve(msg.text);
      else reject(new Error(msg.error ?? 'no metrics'));
    }
    process.on('message', onMessage);
    process.send!({ type: REQUEST, id });
  });
}
