import { html, type SafeHtml } from '../page-kit/template.js';
import { tokensAndMoney } from './money.js';

// The usage page's daily chart: an inline SVG drawn on the server (readable without JavaScript and under
// the pages' CSP: presentation attributes only, no style attribute), with a title and description for
// assistive technology; the page also shows the same figures as a table.

export interface DayValue {
  /** YYYY-MM-DD (UTC). */
  day: string;
  value: number;
}

const WIDTH = 720;
const HEIGHT = 240;
// Room for the labels at the larger size a phone-width screen draws them in (style.ts).
const PAD = { top: 24, right: 8, bottom: 40, left: 96 };
const fmt = new Intl.NumberFormat('en-US');

/** Every UTC day of [from, to), so that days without calls show as zero. */
export function daysOf(from: number, to: number): string[] {
  const out: string[] = [];
  const start = Math.floor(from / 86_400) * 86_400;
  for (let t = start; t < to; t += 86_400) out.push(new Date(t * 1000).toISOString().slice(0, 10));
  return out;
}

export function barChart(values: DayValue[], label: string): SafeHtml {
  const max = Math.max(1, ...values.map((v) => v.value));
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const step = plotW / Math.max(1, values.length);
  const barW = Math.max(1, step * 0.7);
  const bars = values.map((v, i) => {
    const h = (v.value / max) * plotH;
    const x = PAD.left + i * step + (step - barW) / 2;
    return html`<rect class="bar-fill" x="${x.toFixed(1)}" y="${(PAD.top + plotH - h).toFixed(1)}" width="${barW.toFixed(1)}" height="${h.toFixed(1)}"><title>${v.day}: ${tokensAndMoney(v.value)}</title></rect>`;
  });
  // A date under the first, the middle and the last bar; the top of the scale on the left.
  const ticks = [0, Math.floor((values.length - 1) / 2), values.length - 1]
    .filter((i, k, all) => i >= 0 && all.indexOf(i) === k)
    .map((i) => {
      // The first and last dates align with their bar's outer edge, so that no label leaves the drawing.
      const [x, anchor] =
        i === 0 && values.length > 1
          ? [PAD.left + i * step, 'start']
          : i === values.length - 1 && values.length > 1
            ? [PAD.left + (i + 1) * step, 'end']
            : [PAD.left + i * step + step / 2, 'middle'];
      return html`<text x="${x.toFixed(1)}" y="${HEIGHT - 8}" text-anchor="${anchor}">${values[i]!.day.slice(5)}</text>`;
    });
  const total = values.reduce((s, v) => s + v.value, 0);
  return html`<div class="chart"><svg viewBox="0 0 ${WIDTH} ${HEIGHT}" role="img" aria-labelledby="chart-title chart-desc" focusable="false">
<title id="chart-title">${label}</title><desc id="chart-desc">${values.length} days, ${tokensAndMoney(total)} in all, at most ${tokensAndMoney(max)} on one day. The table below lists every day.</desc>
<line x1="${PAD.left}" y1="${PAD.top + plotH}" x2="${WIDTH - PAD.right}" y2="${PAD.top + plotH}"/>
<line x1="${PAD.left}" y1="${PAD.top}" x2="${WIDTH - PAD.right}" y2="${PAD.top}"/>
<text x="${PAD.left - 6}" y="${PAD.top + 8}" text-anchor="end">${fmt.format(max)}</text>
<text x="${PAD.left - 6}" y="${PAD.top + plotH + 4}" text-anchor="end">0</text>
${bars}${ticks}</svg></div>`;
}
