import type { Request, Response } from 'express';
import type { z } from 'zod';
import { csrfField, html, renderPage, sendPage, type SafeHtml } from '../page-kit/html.js';
import { AppError } from '../http/errors.js';
import { navBar } from './nav.js';

// Small building blocks of the portal's forms. Labels are always tied to their input (for/id), errors
// are announced (role=alert) and linked to the field (aria-describedby), so the pages work with a
// keyboard and a screen reader and without JavaScript.

export interface FieldSpec {
  label: string;
  name: string;
  type?: 'text' | 'email' | 'password';
  value?: string;
  autocomplete?: string;
  required?: boolean;
  hint?: string;
  error?: string;
  /** Extra class (e.g. `code` for monospace one-time codes). */
  className?: string;
  inputmode?: 'numeric' | 'text';
  autofocus?: boolean;
  maxlength?: number;
  /** Shown and sent, not editable (an invited address). */
  readonly?: boolean;
}

export function field(f: FieldSpec): SafeHtml {
  const id = `f-${f.name}`;
  const describedBy = [f.hint ? `${id}-hint` : '', f.error ? `${id}-error` : ''].filter(Boolean).join(' ');
  return html`<div class="field">
<label for="${id}">${f.label}${f.hint ? html` <span class="hint" id="${id}-hint">${f.hint}</span>` : ''}</label>
<input id="${id}" name="${f.name}" type="${f.type ?? 'text'}"${f.value !== undefined ? html` value="${f.value}"` : ''}${
    f.autocomplete ? html` autocomplete="${f.autocomplete}"` : ''
  }${f.required ? html` required` : ''}${f.className ? html` class="${f.className}"` : ''}${
    f.inputmode ? html` inputmode="${f.inputmode}"` : ''
  }${f.autofocus ? html` autofocus` : ''}${f.maxlength ? html` maxlength="${f.maxlength}"` : ''}${
    f.readonly ? html` readonly` : ''
  }${describedBy ? html` aria-describedby="${describedBy}"` : ''}${f.error ? html` aria-invalid="true"` : ''}>
${f.error ? html`<div class="field-error" id="${id}-error">${f.error}</div>` : ''}
</div>`;
}

export type Notice = { kind: 'error' | 'ok' | 'info'; text: string };

export function alert(notice: Notice | null | undefined): SafeHtml {
  if (!notice) return html``;
  return html`<div class="alert ${notice.kind}" role="${notice.kind === 'error' ? 'alert' : 'status'}">${notice.text}</div>`;
}

/** A POST form to our own origin with its hidden CSRF field. */
export function postForm(
  req: Request,
  res: Response,
  action: string,
  body: SafeHtml,
  className = 'stack',
): SafeHtml {
  return html`<form method="post" action="${action}" class="${className}">${csrfField(req, res)}${body}</form>`;
}

export function hidden(name: string, value: string | null | undefined): SafeHtml {
  return value ? html`<input type="hidden" name="${name}" value="${value}">` : html``;
}

export interface ShowOptions {
  title: string;
  body: SafeHtml;
  status?: number;
  narrow?: boolean;
  /** Origins a form of this page may end up on (a redirect to the processor's checkout: pageCsp). */
  formAction?: string[];
}

/** Renders and sends a portal page for the request's signed-in user (if any). */
export function show(req: Request, res: Response, opts: ShowOptions): void {
  const p = req.principal;
  const user = p ? { email: p.email, name: p.name } : null;
  sendPage(
    res,
    renderPage({
      title: opts.title,
      body: opts.body,
      user,
      narrow: opts.narrow ?? false,
      nav: navBar(req, res),
    }),
    opts.status ?? 200,
    opts.formAction ? { formAction: opts.formAction } : {},
  );
}

/** The message a person sees for an error: ours are written for people; anything else is generic. */
export function errorText(err: unknown): string {
  if (err instanceof AppError && err.expose) {
    if (err.status === 429) {
      const after = err.extra.headers?.['Retry-After'];
      return after
        ? `Too many attempts. Try again in ${after} seconds.`
        : 'Too many attempts. Try again later.';
    }
    return sentence(err.message);
  }
  return 'Something went wrong on our side. Please try again.';
}

const sentence = (s: string): string =>
  s ? s[0]!.toUpperCase() + s.slice(1) + (/[.!?]$/.test(s) ? '' : '.') : s;

/** Status for re-rendering a form after an error: the AppError's own (4xx), else 500. */
export function errorStatus(err: unknown): number {
  return err instanceof AppError ? err.status : 500;
}

/** Copies Retry-After and similar headers of a client error onto the page response. */
export function applyErrorHeaders(res: Response, err: unknown): void {
  if (err instanceof AppError)
    for (const [k, v] of Object.entries(err.extra.headers ?? {})) {
      if (k.toLowerCase() !== 'www-authenticate') res.setHeader(k, v);
    }
}

/** A string field of a urlencoded form body ('' when absent or not a string). */
export function formValue(req: Request, name: string, max = 1000): string {
  const v = (req.body as Record<string, unknown> | undefined)?.[name];
  return typeof v === 'string' ? v.slice(0, max) : '';
}

/** A string query parameter ('' when absent or repeated). */
export function queryValue(req: Request, name: string, max = 2048): string {
  const v = (req.query as Record<string, unknown>)[name];
  return typeof v === 'string' ? v.slice(0, max) : '';
}

export type FormResult<T> = { ok: true; data: T } | { ok: false; errors: Record<string, string> };

/** zod over a form body (STYLE: zod on every input); field errors keyed by field name, for inline display. */
export function parseForm<T>(schema: z.ZodType<T>, body: unknown): FormResult<T> {
  const result = schema.safeParse(body ?? {});
  if (result.success) return { ok: true, data: result.data };
  const errors: Record<string, string> = {};
  for (const issue of result.error.issues) {
    const key = String(issue.path[0] ?? '_');
    errors[key] ??= issue.message;
  }
  return { ok: false, errors };
}

/** A client error to show inline in the form; anything else is rethrown to the page error handler (logged). */
export function clientError(err: unknown): AppError {
  if (err instanceof AppError && err.expose) return err;
  throw err;
}

/** The password rule's hint, the one every form shows (interface document, Limits; src/accounts/password.ts). */
export const PASSWORD_HINT = 'at least 8 characters, with a letter, a number and a special character';
