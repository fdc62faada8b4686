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

/**
 * What `tokens` svc tokens are worth in US dollars at par (1,000 tokens = 1 dollar: interface document,
 * Token economics), as an exact decimal: 920 → "0.920", 1 → "0.001".
 */
export function usdAtPar(tokens: number): string {
  const sign = tokens < 0 ? '-' : '';
  const milli = Math.abs(tokens);
  return `${sign}${Math.floor(milli / 1000)}.${String(milli % 1000).padStart(3, '0')}`;
}
