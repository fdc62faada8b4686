import http from 'node:http';

// The process side of test/helpers/forwarding-proxy.ts: a reverse proxy as nginx is usually set up in
// front of an app (`proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for`,
// `X-Forwarded-Host $host`, `Host $proxy_host`): it appends the address it was connected from to
// X-Forwarded-For, keeps whatever the client wrote there, and connects upstream from its own address.
// Announces its port as one JSON line on stdout.

const target = new URL(process.env.PROXY_TARGET ?? '');
const localAddress = process.env.PROXY_LOCAL_ADDRESS || undefined;
// An inner proxy keeps the X-Forwarded-Host of the outer one (a chain of trusted proxies).
const keepForwardedHost = process.env.PROXY_KEEP_FORWARDED_HOST === '1';

const server = http.createServer((req, res) => {
  const prior = req.headers['x-forwarded-for'];
  const peer = req.socket.remoteAddress ?? '';
  const headers: http.OutgoingHttpHeaders = {
    ...req.headers,
    host: target.host,
    'x-forwarded-for': prior ? `${Array.isArray(prior) ? prior.join(', ') : prior}, ${peer}` : peer,
    'x-forwarded-host':
      keepForwardedHost && req.headers['x-forwarded-host']
        ? req.headers['x-forwarded-host']
        : req.headers.host,
    connection: 'close',
  };
  const upstream = http.request(
    {
      host: target.hostname,
      port: target.port,
      method: req.method,
      path: req.url,
      headers,
      agent: false,
      ...(localAddress ? { localAddress } : {}),
    },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  upstream.on('error', () => {
    if (!res.headersSent) res.writeHead(502);
    res.end();
  });
  req.pipe(upstream);
});

server.listen(0, process.env.PROXY_LISTEN_HOST ?? '127.0.0.1', () => {
  const { port } = server.address() as { port: number };
  process.stdout.write(`${JSON.stringify({ port })}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
