import stripAnsi from 'strip-ansi';

// Rows printed in aligned columns (whoami, orgs, usage, keys): each column but the last padded to its
// widest cell, measured without colour codes, two spaces between columns. Cells are already inert.

export function columns(rows: string[][], align: ('left' | 'right')[] = []): string[] {
  const widths: number[] = [];
  for (const row of rows)
    row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, stripAnsi(cell).length)));
  return rows.map((row) =>
    row
      .map((cell, i) => {
        if (i === row.length - 1 && align[i] !== 'right') return cell;
        const pad = ' '.repeat(widths[i]! - stripAnsi(cell).length);
        return align[i] === 'right' ? pad + cell : cell + pad;
      })
      .join('  ')
      .trimEnd(),
  );
}

/** "2026-11-28 14:02 UTC" — minutes, as the server keeps a key's last use (CONTRACT §6). */
export const utcMinute = (seconds: number) =>
  `${new Date(seconds * 1000).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
