import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { html, raw, renderPage, pageCsp, escapeHtml } from '../../src/page-kit/html.js';
import { PAGE_CSS } from '../../src/page-kit/style.js';
import { safeReturnTo, loginUrlFor } from '../../src/page-kit/return-to.js';

// The layout's rules as plain functions; the HTTP side (headers, CSRF, redirects) is in portal-pages.

describe('html template', () => {
  it('escapes every interpolation, in text and attributes', () => {
    const evil = `<script>alert("x")</script>' onmouseover='1`;
    const out = html`<p title="${evil}">${evil}</p>`.value;
    expect(out).not.toContain('<script>');
    expect(out).not.toContain(`"x"`);
    expect(out).not.toContain(`'1`);
    expect(out).toContain('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#39; onmouseover=&#39;1');
  });

  it('keeps nested fragments and raw(), joins arrays, drops null/undefined/false', () => {
    const items = ['a<b', 'c'].map((t) => html`<li>${t}</li>`);
    const out = html`<ul>${items}</ul>${raw('<hr>')}${null}${undefined}${false}${0}`.value;
    expect(out).toBe('<ul><li>a&lt;b</li><li>c</li></ul><hr>0');
  });

  it('escapes backticks and ampersands', () => {
    expect(escapeHtml('`&')).toBe('&#96;&amp;');
  });
});

describe('renderPage', () => {
  it('is a full document with the stylesheet inline and the title escaped', () => {
    const page = renderPage({
      title: 'A <b>',
      body: html`<p>hi</p>`,
      user: { email: 'x@example.test', name: '<Bob>' },
    });
    expect(page.startsWith('<!doctype html>')).toBe(true);
    expect(page).toContain('<title>A &lt;b&gt; · svc</title>');
    expect(page).toContain(`<style>${PAGE_CSS}</style>`);
    expect(page).toContain('&lt;Bob&gt;');
    expect(page).not.toMatch(/<script|<link|https?:\/\//);
  });

  it('escapes a string body as text', () => {
    expect(renderPage({ title: 't', body: '<i>x</i>' })).toContain('&lt;i&gt;x&lt;/i&gt;');
  });

  it('allows exactly the inline stylesheet by hash, and no script', () => {
    const hash = createHash('sha256').update(PAGE_CSS).digest('base64');
    const csp = pageCsp();
    expect(csp).toContain(`style-src 'sha256-${hash}'`);
    for (const d of [
      "default-src 'self'",
      "frame-ancestors 'none'",
      "base-uri 'none'",
      "form-action 'self'",
      "object-src 'none'",
      "script-src 'none'",
    ]) {
      expect(csp).toContain(d);
    }
    expect(csp).not.toContain('unsafe-inline');
    expect(pageCsp({ formAction: ['http://127.0.0.1:9999'] })).toContain(
      "form-action 'self' http://127.0.0.1:9999",
    );
  });
});

describe('return_to (no open redirect)', () => {
  it('keeps same-origin relative paths', () => {
    expect(safeReturnTo('/account/device?user_code=BCDF-GHJK')).toBe('/account/device?user_code=BCDF-GHJK');
    expect(safeReturnTo('/oauth/authorize?client_id=a&x=1#f')).toBe('/oauth/authorize?client_id=a&x=1#f');
  });

  it.each([
    'https://evil.example/',
    '//evil.example/x',
    '/\\evil.example',
    '\\\\evil.example',
    '/%0d%0aSet-Cookie:x',
    'javascript:alert(1)',
    'account',
    '/\tevil',
    '',
    '/account/login?return_to=/x',
    42,
    undefined,
  ])('refuses %j', (value) => {
    const r = safeReturnTo(value);
    if (value === '/%0d%0aSet-Cookie:x') {
      // Percent-encoded bytes stay encoded inside our own path: harmless, still same-origin.
      expect(r).toBe('/%0d%0aSet-Cookie:x');
    } else {
      expect(r).toBeNull();
    }
  });

  it('builds the sign-in URL with the target encoded', () => {
    expect(loginUrlFor('/account/device?user_code=A B')).toBe(
      '/account/login?return_to=%2Faccount%2Fdevice%3Fuser_code%3DA%2520B',
    );
    expect(loginUrlFor('https://evil.example')).toBe('/account/login');
    expect(loginUrlFor('/account')).toBe('/account/login');
  });
});
