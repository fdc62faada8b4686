// `npm run bench -- <name>`: runs bench/<name>.ts (verify, oauth, mcp, billing, proxy; and cpu, a probe), each of which
// measures svc beside a peer on the same machine in the same run and prints ratios.
const name = process.argv[2];
const known = ['verify', 'oauth', 'mcp', 'billing', 'proxy', 'cpu'];
if (!name || !known.includes(name)) {
  process.stderr.write(`usage: npm run bench -- <${known.join('|')}>\n`);
  process.exit(2);
}
await import(`./${name}.ts`);
