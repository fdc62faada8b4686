import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

// An OTLP/HTTP endpoint that takes every export and counts it (requests and bytes), answering 200 as a
// collector does: where a traced svc side of a bench sends its spans (bench/ab.ts, BENCH_AB_TRACES=1).
// Nothing is decoded or kept; test/helpers/otlp-receiver.ts decodes for the tests.

export interface OtlpSink {
  /** For OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string;
  readonly exports: number;
  readonly bytes: number;
  close(): Promise<void>;
}

export async function startOtlpSink(): Promise<OtlpSink> {
  let exports = 0;
  let bytes = 0;
  const server = createServer((req, res) => {
    req.on('data', (c: Buffer) => (bytes += c.length));
    req.on('end', () => {
      if (req.url === '/v1/traces') exports++;
      res.writeHead(req.url === '/v1/traces' ? 200 : 404).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get exports() {
      return exports;
    },
    get bytes() {
      return bytes;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
