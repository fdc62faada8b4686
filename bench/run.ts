// `npm run bench -- <name>`: runs bench/<name>.ts (verify, oauth, mcp, billing, proxy, cluster, scale, memory; and cpu, ab and give-back, probes), each of which
// measures svc beside a peer on the same machine in the same run and prints ratios.
import { cpuTimes, stealReport } from './machine.js';

const name = process.argv[2];
// `--smoke`: a short run that proves the bench still works (bench/knobs.ts); children inherit the variable.
if (process.argv.includes('--smoke')) process.env.BENCH_SMOKE = '1';
const known = [
  'verify',
  'oauth',
  'mcp',
  'billing',
  'proxy',
  'cluster',
  'scale',
  'memory',
  'cpu',
  'ab',
  'give-back',
];
if (!name || !known.includes(name)) {
  process.stderr.write(`usage: npm run bench -- <${known.join('|')}> [--smoke]\n`);
  process.exit(2);
}
// Whatever the bench, its reader learns how much of the machine it had (bench/machine.ts).
const before = cpuTimes();
process.on('exit', () => process.stdout.write(stealReport(before)));
await import(`./${name}.ts`);
