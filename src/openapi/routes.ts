import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import express, { Router } from 'express';
import type { Deps } from '../deps.js';
import { originVary, requestOrigin } from '../http/origin.js';
import { openApiDocumentFor } from './document.js';

// GET /openapi.json on every origin (that origin its server), and /docs: the document rendered by
// Swagger UI (swagger-ui-dist, served from node_modules: no CDN), under a policy that lets nothing but
// this origin's own scripts, styles and requests run (docs/openapi.md).

const swaggerDir = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));

/** The page's own policy: the page kit's (src/page-kit/html.ts) with this origin's scripts allowed. */
export const DOCS_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "object-src 'none'",
].join('; ');

const DOCS_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>svc API reference</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
`;

// An inline script would need 'unsafe-inline' (or a hash); a file of this origin needs nothing more.
// With 150 rows or more (tags and operations) Swagger UI renders only the rows near the viewport and the
// rest as the reader scrolls: a page that shows 8 operations in a headless browser is complete
// (docs/openapi.md § Swagger UI renders what is on screen).
const DOCS_INIT = `window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#swagger-ui', deepLinking: true });\n`;

/**
 * The terminal client's guide (docs/cli.md), which `svc --help` points to as {server}/docs/cli: read from
 * the checkout or the image (two folders up from src/openapi, three from dist/src/openapi); absent, 404.
 */
function cliGuide(): string | undefined {
  for (const up of ['../../docs/cli.md', '../../../docs/cli.md']) {
    try {
      return readFileSync(new URL(up, import.meta.url), 'utf8');
    } catch {
      /* try the next */
    }
  }
  return undefined;
}

export function openApiRoutes(deps: Deps): Router {
  const router = Router();
  router.get('/openapi.json', (req, res) => {
    res.set('Access-Control-Allow-Origin', '*');
    res.set('Cache-Control', 'public, max-age=300');
    res.set('Vary', originVary(deps.config));
    res.json(openApiDocumentFor(requestOrigin(req, deps.config), { devMode: deps.config.devMode }));
  });
  router.get('/docs', (_req, res) => {
    res.set({
      'Content-Type': 'text/html; charset=utf-8',
      'Content-Security-Policy': DOCS_CSP,
      'X-Frame-Options': 'DENY',
      'Referrer-Policy': 'no-referrer',
      'X-Content-Type-Options': 'nosniff',
    });
    res.send(DOCS_PAGE);
  });
  router.get('/docs/cli', (_req, res) => {
    const guide = cliGuide();
    if (guide === undefined) return void res.status(404).type('text/plain').send('not found\n');
    // Markdown as text: readable in a browser and in a terminal (curl), and nothing in it runs.
    res.set({ 'X-Content-Type-Options': 'nosniff', 'Cache-Control': 'public, max-age=300' });
    res.type('text/plain; charset=utf-8').send(guide);
  });
  router.get('/docs/init.js', (_req, res) => {
    res.type('text/javascript').set('X-Content-Type-Options', 'nosniff').send(DOCS_INIT);
  });
  router.use(
    '/docs/assets',
    express.static(swaggerDir, { index: false, fallthrough: true, maxAge: '1h', dotfiles: 'ignore' }),
  );
  return router;
}
