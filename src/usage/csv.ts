// CSV (RFC 4180) for the usage exports: CRLF line ends, a field quoted when it holds a comma, quote or
// line break. A text field that a spreadsheet would read as a formula (=, +, -, @, tab, CR at its start:
// OWASP "CSV injection") is prefixed with a single quote; token and app names are chosen by users.

const FORMULA_START = /^[=+\-@\t\r]/;

/** What a CSV cell may hold: an object here would print as "[object Object]", so the types refuse it. */
export type CsvField = string | number | bigint | boolean | null | undefined;

function field(value: CsvField): string {
  if (value === null || value === undefined) return '';
  let text = String(value);
  if (typeof value === 'string' && FORMULA_START.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export function toCsv(header: string[], rows: CsvField[][]): string {
  return [header, ...rows].map((row) => row.map(field).join(',')).join('\r\n') + '\r\n';
}
