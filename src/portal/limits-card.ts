import type { Request, Response } from 'express';
import { z } from 'zod';
import type { Role } from '../db/schema.js';
import { html, type SafeHtml } from '../page-kit/html.js';
import { field, formValue, postForm } from './components.js';

// The organization's RPM and TPM limits on its settings page (CONTRACT §11): the owner sets them in a
// plain form (blank = no limit), members read them, viewers do not see them.

const optionalLimit = (what: string) =>
  z
    .string()
    .trim()
    .regex(/^\d*$/, `Enter a whole number of ${what}, or leave it blank for no limit.`)
    .transform((v) => (v === '' ? null : Number(v)))
    .refine((v) => v === null || (v >= 1 && v <= 2_147_483_647), `Enter at least 1, or leave it blank.`);

export const limitsForm = z.object({ rpm: optionalLimit('calls'), tpm: optionalLimit('tokens') });

export interface LimitsView {
  rpm: number | null;
  tpm: number | null;
}

const fmt = new Intl.NumberFormat('en-US');
const shown = (v: number | null, unit: string) => (v === null ? 'no limit' : `${fmt.format(v)} ${unit}`);

export function limitsCard(
  req: Request,
  res: Response,
  input: { role: Role; action: string; limits: LimitsView; errors?: Record<string, string> },
): SafeHtml {
  const { role, limits, errors = {} } = input;
  if (role === 'viewer') return html``;
  const intro = html`<p>Model calls and run steps per minute (RPM) and tokens per minute (TPM) for the whole organization. Over either, calls get 429 <code>rate_limit_exceeded</code> until the minute's window frees.</p>`;
  if (role !== 'owner') {
    return html`<section class="card" aria-labelledby="h-limits"><h2 id="h-limits">Rate limits</h2>${intro}
<dl><dt>Requests per minute</dt><dd>${shown(limits.rpm, 'calls')}</dd><dt>Tokens per minute</dt><dd>${shown(limits.tpm, 'tokens')}</dd></dl>
<p class="muted">Only the owner can change them.</p></section>`;
  }
  const value = (name: 'rpm' | 'tpm') =>
    errors[name] ? formValue(req, name, 20) : (limits[name]?.toString() ?? '');
  return html`<section class="card" aria-labelledby="h-limits"><h2 id="h-limits">Rate limits</h2>${intro}${postForm(
    req,
    res,
    input.action,
    html`${field({ label: 'Requests per minute', hint: '(blank: no limit)', name: 'rpm', value: value('rpm'), inputmode: 'numeric', autocomplete: 'off', maxlength: 10, error: errors.rpm, autofocus: Boolean(errors.rpm) })}
${field({ label: 'Tokens per minute', hint: '(blank: no limit)', name: 'tpm', value: value('tpm'), inputmode: 'numeric', autocomplete: 'off', maxlength: 10, error: errors.tpm, autofocus: Boolean(errors.tpm && !errors.rpm) })}
<div class="actions"><button type="submit" class="secondary">Save limits</button></div>`,
  )}</section>`;
}
