// `npm run bench -- <name>`: runs bench/<name>.ts (verify, oauth, mcp, billing, proxy), each of which
// measures svc beside a peer on the same machine in the same run and prints ratios.
const name = process.argv[2];
const known = ['verify', 'oauth', 'mcp', 'billing', 'proxy'];
if (!name || !known.includes(name)) {
  process.stderr.write(`usage: npm run bench -- <${known.join('|')}>\n`);
  process.exit(2);
}
await import(`./${name}.ts`);
