import { Router } from 'express';
import MarkdownIt from 'markdown-it';
import { asc, eq } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { projectReports } from '../db/schema.js';
import { html, raw, renderPage, sendPage } from '../page-kit/html.js';
import { projectForLink } from './shares.js';

// The public, read-only page of a share link `{V2_URL}/s/<token>` (CONTRACT §10): the project's brief
// and reports. Markdown is rendered without raw HTML (`html: false`) and without linkify, and
// markdown-it's link validation drops javascript:/vbscript:/data: URLs; the page CSP allows no script.
// An unknown or revoked token answers 404 like any missing page.

const md = new MarkdownIt({ html: false, linkify: false, typographer: false });
// No sideways scroll at phone width: code wraps (.md pre in the stylesheet), and a
// wide table scrolls inside a region a keyboard can reach and a screen reader can name (axe-core's
// scrollable-region-focusable; WCAG 2.1.1).
md.renderer.rules.table_open = () =>
  '<div class="scroll" tabindex="0" role="region" aria-label="Table"><table>\n';
md.renderer.rules.table_close = () => '</table></div>\n';

/**
 * Renders untrusted markdown as safe HTML, its headings moved `below` levels down (capped at h6), so
 * that a document's `#` sits under the page's own headings instead of beside the page's h1 (WCAG
 * 1.3.1: one outline). On this page the brief sits under "Brief" (h2), so its `#` is h3;
 * a report's body sits under the report's title (h3), so its `#` is h4.
 */
export function renderMarkdown(text: string, below = 0): string {
  const env = {};
  const tokens = md.parse(text, env);
  for (const t of tokens)
    if (t.type === 'heading_open' || t.type === 'heading_close')
      t.tag = `h${Math.min(6, Number(t.tag.slice(1)) + below)}`;
  return md.renderer.render(tokens, md.options, env);
}

export function sharePageRoutes(deps: Deps): Router {
  const router = Router();
  router.get('/s/:token', async (req, res) => {
    const project = await projectForLink(deps.db, deps.keys.hmac, req.params.token ?? '');
    if (!project) {
      sendPage(
        res,
        renderPage({
          title: 'Not found',
          narrow: true,
          body: html`<div class="card"><h1>Not found</h1><p>This link does not exist or was revoked.</p></div>`,
        }),
        404,
      );
      return;
    }
    const reports = await deps.db
      .select()
      .from(projectReports)
      .where(eq(projectReports.projectId, project.id))
      .orderBy(asc(projectReports.createdAt), asc(projectReports.id));
    // The portal's card layout: the project, its brief and its reports each a card.
    const body = html`<div class="card"><h1>${project.name}</h1>
${project.description ? html`<p class="lead">${project.description}</p>` : ''}<p class="muted">A read-only page shared by link.</p></div>
<section class="card brief md" aria-labelledby="h-brief"><h2 id="h-brief">Brief</h2>${raw(renderMarkdown(project.brief, 2))}</section>
<section class="card reports" aria-labelledby="h-reports"><h2 id="h-reports">Reports</h2>
${reports.length === 0 ? html`<p>No reports yet.</p>` : ''}
${reports.map((r) => html`<article class="report md"><h3>${r.title}</h3>${raw(renderMarkdown(r.body, 3))}</article>`)}
</section>`;
    // The token is a credential in the URL: never let it leak through Referer (sendPage sets no-referrer).
    sendPage(res, renderPage({ title: project.name, body }));
  });
  return router;
}
