import { createHash } from 'node:crypto';

// The one stylesheet of every server-rendered page (portal, consent, dev checkout). It is inlined in a
// <style> element and allowed by its SHA-256 hash in the Content-Security-Policy, so pages need no
// external asset, no 'unsafe-inline' and no second request. Colours meet WCAG AA contrast (text on
// background ≥ 4.5:1); focus is always visible (a 3 px outline, never removed). A table wider than the
// screen scrolls sideways inside its `.scroll` box, which every page marks `role="region" tabindex="0"`
// with the table's name, so a keyboard can reach it and scroll it with the arrow keys (WCAG 2.1.1; axe
// `scrollable-region-focusable`). A select is as wide as its longest option (an e-mail address in a
// filter's "Who" list), so in a row of fields (.actions) it and its field are capped at the row's width.

export const PAGE_CSS = `
:root{--bg:#f5f6f8;--card:#fff;--ink:#1c2430;--muted:#56606e;--line:#d5dae1;--accent:#1f5fbf;
--accent-ink:#fff;--danger:#b42318;--ok:#1d6b3a;--focus:#f2a900;--radius:10px;
font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;line-height:1.5;color:var(--ink);background:var(--bg)}
*{box-sizing:border-box}
body{margin:0;min-height:100vh;display:flex;flex-direction:column}
a{color:var(--accent)}
a:hover{text-decoration-thickness:2px}
:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
.skip{position:absolute;left:-999px}
.skip:focus{left:1rem;top:1rem;background:var(--card);padding:.5rem 1rem;z-index:2}
header.top{background:#1c2430;color:#fff}
header.top .bar{max-width:960px;margin:0 auto;padding:.75rem 1.25rem;display:flex;gap:1rem;align-items:center;justify-content:space-between}
header.top a{color:#fff;text-decoration:none;font-weight:600}
header.top .brand{font-size:1.15rem;letter-spacing:.02em}
header.top .who{font-size:.9rem;opacity:.92}
nav.site{background:#27313f}
nav.site .bar{max-width:960px;margin:0 auto;padding:.4rem 1.25rem;display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:center}
nav.site ul{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:.25rem 1rem}
nav.site a{color:#fff;font-weight:500;text-decoration:none}
nav.site a[aria-current=page]{text-decoration:underline;text-underline-offset:.3em;font-weight:700}
nav.site .switch{display:flex;gap:.4rem;align-items:center}
nav.site select{width:auto;max-width:14rem;padding:.3rem .4rem}
nav.site button{padding:.3rem .7rem}
nav.site .org-name{color:#fff;font-weight:600}
.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
.scroll{overflow-x:auto}
.button.danger{background:#fff;color:var(--danger);border-color:var(--danger)}
form.inline{display:flex;flex-wrap:wrap;gap:.4rem;align-items:center}
form.inline select{width:auto}
form.inline button{padding:.35rem .8rem}
ul.rows{list-style:none;margin:0;padding:0}
ul.rows li{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:center;justify-content:space-between;padding:.5rem 0;border-bottom:1px solid var(--line);overflow-wrap:anywhere}
@media (max-width:640px){table.stack thead{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0)}
table.stack tr{display:block;padding:.5rem 0;border-bottom:1px solid var(--line)}
table.stack td{display:block;border:0;padding:.2rem 0;overflow-wrap:anywhere}
table.stack td[data-label]::before{content:attr(data-label);display:block;font-size:.8rem;font-weight:600;color:var(--muted)}
table.stack td.num{text-align:left}}
.chart svg{display:block;width:100%;height:auto}
.chart .bar-fill{fill:var(--accent)}
.chart text{fill:var(--muted);font-size:11px}
.chart line{stroke:var(--line)}
@media (max-width:640px){.chart text{font-size:24px}}
.num{text-align:right;font-variant-numeric:tabular-nums}
.pager{display:flex;gap:1rem;margin-top:.75rem}
.actions label{margin:0}
.actions select{width:auto;max-width:100%}
.actions>.field{min-width:0;max-width:100%}
.actions input[type=email]{width:auto;flex:1 1 14rem}
.mail{white-space:pre-wrap;overflow-wrap:anywhere}
nav.sections ul{list-style:none;margin:0 0 1rem;padding:0;display:flex;flex-wrap:wrap;gap:.25rem 1rem}
[id]{scroll-margin-top:1rem}
pre.copy{white-space:pre-wrap;overflow-wrap:anywhere;background:var(--code-bg,#f4f4f5);padding:.6rem .75rem;border-radius:6px;font-size:.85rem}
ol.steps{padding-left:1.25rem}ol.steps li+li{margin-top:.75rem}
.md{overflow-wrap:anywhere}.md pre{white-space:pre-wrap}.md img{max-width:100%}
.report+.report{border-top:1px solid var(--line);margin-top:1rem;padding-top:.5rem}
main{flex:1;width:100%;max-width:960px;margin:0 auto;padding:2rem 1.25rem}
main.narrow{max-width:460px}
h1{font-size:1.6rem;margin:0 0 1rem}
h2{font-size:1.2rem;margin:0 0 .75rem}
h3{font-size:1rem;margin:1rem 0 .5rem}
p{margin:.5rem 0}
.card{background:var(--card);border:1px solid var(--line);border-radius:var(--radius);padding:1.5rem;margin:0 0 1.25rem;box-shadow:0 1px 2px rgba(0,0,0,.04)}
.grid{display:grid;gap:1.25rem;grid-template-columns:repeat(auto-fit,minmax(280px,1fr))}
.grid{margin-bottom:1.25rem}
.grid>.card{margin:0}
.sub{font-size:.8rem;color:var(--muted)}
form{margin:0}
form.stack>*+*{margin-top:.9rem}
label{display:block;font-weight:600;margin-bottom:.3rem}
.hint{color:var(--muted);font-size:.875rem;font-weight:400}
input[type=text],input[type=email],input[type=password],select{width:100%;font:inherit;padding:.6rem .7rem;border:1px solid #8a94a3;border-radius:6px;background:#fff;color:var(--ink)}
input:focus-visible,select:focus-visible{border-color:var(--accent)}
input.code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;letter-spacing:.12em;font-size:1.15rem;text-transform:uppercase}
button,.button{display:inline-block;font:inherit;font-weight:600;padding:.6rem 1.1rem;border-radius:6px;border:1px solid var(--accent);background:var(--accent);color:var(--accent-ink);cursor:pointer;text-decoration:none}
button:hover{filter:brightness(1.08)}
button.secondary{background:#fff;color:var(--accent)}
button.danger{background:#fff;color:var(--danger);border-color:var(--danger)}
button.link{background:none;border:0;color:var(--accent);padding:0;text-decoration:underline;font-weight:400}
.actions{display:flex;gap:.75rem;flex-wrap:wrap;align-items:center}
.alert{border-radius:6px;padding:.75rem 1rem;margin:0 0 1rem;border:1px solid}
.alert.error{background:#fdecea;border-color:#f1b7b0;color:var(--danger)}
.alert.ok{background:#e8f5ec;border-color:#a6d4b5;color:var(--ok)}
.alert.info{background:#eaf1fb;border-color:#b3cbee;color:#184b96}
.field-error{color:var(--danger);font-size:.875rem;margin-top:.25rem}
.muted{color:var(--muted)}
.badge{display:inline-block;font-size:.78rem;font-weight:600;padding:.1rem .5rem;border-radius:999px;background:#e7eaef;color:var(--ink)}
.badge.ok{background:#e8f5ec;color:var(--ok)}
.badge.warn{background:#fff4e0;color:#8a4b00}
table{width:100%;border-collapse:collapse;font-size:.95rem}
th,td{text-align:left;padding:.5rem .4rem;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;color:var(--muted);font-size:.85rem}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.92em;word-break:break-all}
.codes{columns:2;padding:0;list-style:none;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.qr{max-width:220px;background:#fff;padding:.5rem;border:1px solid var(--line);border-radius:6px}
.qr svg{display:block;width:100%;height:auto}
.usercode{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:1.6rem;letter-spacing:.15em;font-weight:700}
footer{color:var(--muted);font-size:.85rem;text-align:center;padding:1.5rem}
@media (max-width:520px){main{padding:1.25rem .9rem}.card{padding:1.1rem}h1{font-size:1.35rem}}
@media (prefers-color-scheme:dark){:root{--bg:#111418;--card:#1b2027;--ink:#e8ebef;--muted:#a9b2bd;--line:#333b46;--accent:#7fb0ff;--accent-ink:#0b1a33}
input[type=text],input[type=email],input[type=password],select{background:#0f1318;color:var(--ink);border-color:#5b6573}
button.secondary,button.danger,.button.danger{background:transparent}.qr{background:#fff}
header.top{background:#0a0d11;border-bottom:1px solid var(--line)}
.alert.error{background:#3a1714;color:#ffb4ab}.alert.ok{background:#13301f;color:#9ee2b5}.alert.info{background:#152a4a;color:#b7d2ff}
.badge{background:#2c333d}.badge.ok{background:#13301f;color:#9ee2b5}.badge.warn{background:#3a2a0f;color:#ffd591}}
`.trim();

let cachedHash: string | undefined;

/** The CSP source that allows exactly this stylesheet (CSP3 hash-source). */
export function styleHashSource(): string {
  cachedHash ??= `'sha256-${createHash('sha256').update(PAGE_CSS, 'utf8').digest('base64')}'`;
  return cachedHash;
}
