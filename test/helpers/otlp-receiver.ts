import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

// An OTLP/HTTP trace receiver on 127.0.0.1, as a collector is one: POST /v1/traces, answered 200 with an
// empty ExportTraceServiceResponse. JSON bodies (OTEL_EXPORTER_OTLP_PROTOCOL=http/json) are decoded into
// spans as the OTLP JSON encoding writes them (ids in hex, 64-bit integers as strings or numbers);
// protobuf bodies are kept raw and counted. Every raw body is kept, for scanning.

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client. */
  kind: number;
  /** 0 unset, 1 ok, 2 error. */
  status: number;
  /** The status's description, when the span has one. */
  statusMessage?: string;
  /** Its events (`exception` among them), with their attributes. */
  events: { name: string; attributes: Record<string, unknown> }[];
  attributes: Record<string, unknown>;
  /** The resource's attributes (service.name, …). */
  resource: Record<string, unknown>;
}

export interface OtlpReceiver {
  /** For OTEL_EXPORTER_OTLP_ENDPOINT (the exporter appends /v1/traces). */
  url: string;
  /** A svc's environment for tracing to this receiver: OTLP/HTTP JSON, spans sent 50 ms after they end. */
  env: Record<string, string>;
  spans: ReceivedSpan[];
  /** Each request's body as text, JSON or protobuf alike. */
  bodies: string[];
  /** Content-Type of each request. */
  contentTypes: string[];
  /** Request headers of each export (to see OTEL_EXPORTER_OTLP_HEADERS arrive). */
  headers: Record<string, string | string[] | undefined>[];
  close(): Promise<void>;
}

interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
}

function valueOf(v: AnyValue): unknown {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(valueOf);
  return undefined;
}

const attributesOf = (list: { key: string; value: AnyValue }[] | undefined) =>
  Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]));

interface ExportRequest {
  resourceSpans?: {
    resource?: { attributes?: { key: string; value: AnyValue }[] };
    scopeSpans?: {
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind?: number;
        status?: { code?: number; message?: string };
        attributes?: { key: string; value: AnyValue }[];
        events?: { name: string; attributes?: { key: string; value: AnyValue }[] }[];
      }[];
    }[];
  }[];
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const bodies: string[] = [];
  const contentTypes: string[] = [];
  const headers: OtlpReceiver['headers'] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      const body = Buffer.concat(chunks);
      const type = req.headers['content-type'] ?? '';
      bodies.push(body.toString('utf8'));
      contentTypes.push(type);
      headers.push(req.headers);
      if (type.startsWith('application/json')) {
        const decoded = JSON.parse(body.toString('utf8')) as ExportRequest;
        for (const rs of decoded.resourceSpans ?? []) {
          const resource = attributesOf(rs.resource?.attributes);
          for (const ss of rs.scopeSpans ?? [])
            for (const s of ss.spans ?? [])
              spans.push({
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId ?? '',
                name: s.name,
                kind: s.kind ?? 0,
                status: s.status?.code ?? 0,
                ...(s.status?.message ? { statusMessage: s.status.message } : {}),
                events: (s.events ?? []).map((e) => ({
                  name: e.name,
                  attributes: attributesOf(e.attributes),
                })),
                attributes: attributesOf(s.attributes),
                resource,
              });
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } else res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    },
    spans,
    bodies,
    contentTypes,
    headers,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
