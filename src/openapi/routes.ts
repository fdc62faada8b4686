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
<link rel="stylesheet" href="/docs/docs.css">
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
// Two touches keep the page axe-clean (WCAG 4.1.2), made whenever Swagger UI renders: with deep links on,
// each operation's expand button holds a link to itself (a control inside a control: axe
// `nested-interactive`), so the link loses its href (the button still opens the operation and the
// address still follows it: deep linking updates it on opening and reads it on load); and the servers
// select, which Swagger UI renders without a label (axe `select-name`), gets a name.
const DOCS_INIT = `window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#swagger-ui', deepLinking: true });
function svcAccessible() {
  document.querySelectorAll('.opblock-summary-control a[href]').forEach(function (a) { a.removeAttribute('href'); });
  var select = document.getElementById('servers');
  if (select && !select.hasAttribute('aria-label')) select.setAttribute('aria-label', 'Server');
}
new MutationObserver(svcAccessible).observe(document.getElementById('swagger-ui'), {
  childList: true, subtree: true, attributes: true, attributeFilter: ['href'],
});
`;

// Swagger UI's own colours, darkened where its text falls below WCAG AA's 4.5:1 (axe `color-contrast`):
// the method badges (white on light blue, green, orange…), the version badges, the document's link and
// the Authorize button. Each colour gives white text (or text on white) at least 4.5:1.
const DOCS_CSS = `.swagger-ui .opblock.opblock-get .opblock-summary-method{background:#1a5aa8}
.swagger-ui .opblock.opblock-post .opblock-summary-method{background:#17663a}
.swagger-ui .opblock.opblock-put .opblock-summary-method{background:#8a4b00}
.swagger-ui .opblock.opblock-delete .opblock-summary-method{background:#b42318}
.swagger-ui .opblock.opblock-patch .opblock-summary-method{background:#0f6b61}
.swagger-ui .opblock.opblock-head .opblock-summary-method,.swagger-ui .opblock.opblock-options .opblock-summary-method{background:#6b3fa0}
.swagger-ui .info .title small{background:#4b5563}
.swagger-ui .info .title small.version-stamp{background:#3d6b00}
.swagger-ui .info .url,.swagger-ui .info a{color:#1a5aa8}
.swagger-ui .btn.authorize{color:#17663a;border-color:#17663a}
.swagger-ui .btn.authorize span{color:#17663a}
.swagger-ui .btn.authorize svg{fill:#17663a}
.swagger-ui .btn.cancel{color:#b42318;border-color:#b42318}
.swagger-ui .btn.execute{background:#1a5aa8;border-color:#1a5aa8}
.swagger-ui .download-contents{background:#4b5563}
.swagger-ui .json-schema-2020-12-expand-deep-button{color:#4b5563}
.swagger-ui .parameter__in,.swagger-ui .parameter__extension,.swagger-ui .parameter__deprecated,.swagger-ui .prop-format{color:#4b5563}
`;

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
  router.get('/docs/docs.css', (_req, res) => {
    res.type('text/css').set('X-Content-Type-Options', 'nosniff').send(DOCS_CSS);
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
