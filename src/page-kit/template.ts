// Escaping template for server-rendered pages: every interpolation is escaped unless it is a SafeHtml.

/** A fragment of markup that is already safe; only `html` and `raw` make one. */
export class SafeHtml {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
  '`': '&#96;',
};

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"'`]/g, (c) => ESCAPES[c]!);
}

/** Opt out of escaping: for markup this code built itself (e.g. a generated SVG), never for input. */
export const raw = (markup: string): SafeHtml => new SafeHtml(markup);

/** What a page may interpolate: text and numbers (escaped), fragments, lists of them, and nothing. An
 *  object of any other kind is refused by the type checker, so no page can show "[object Object]". */
export type HtmlValue =
  string | number | bigint | boolean | null | undefined | SafeHtml | readonly HtmlValue[];

function renderValue(value: HtmlValue): string {
  if (value === null || value === undefined || value === false) return '';
  if (value instanceof SafeHtml) return value.value;
  if (Array.isArray(value)) return value.map(renderValue).join('');
  return escapeHtml(String(value));
}

/**
 * Tagged template: every interpolation is escaped (text and attribute values alike; always quote
 * attributes), arrays are joined, nested `html` fragments are kept as they are; null, undefined and
 * false render as nothing so `${cond && html`…`}` works.
 */
export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): SafeHtml {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += renderValue(values[i]) + strings[i + 1]!;
  return new SafeHtml(out);
}
