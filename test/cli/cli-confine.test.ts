import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { modelSuite } from '../helpers/model-suite.js';
import { CLI_TEST_TIMEOUT_MS, cliHome, inTerminal, runCli, type CliHome } from '../helpers/cli.js';
import type { ChatRequest } from '../helpers/fake-upstream.js';
import { executingConfig, likelySecret } from '../../src/cli/confine.js';

// Confinement beyond paths (docs/cli.md, "What is confined and what is asked"): writes to configuration
// that executes are refused even with --yes; reads of likely secrets ask, even with --yes, and are
// refused where nobody can answer. And `svc login --browser` opens only the issuer's own https origin.

const suite = modelSuite();
let home: CliHome;
let work: string;

beforeAll(async () => {
  home = await cliHome();
});
afterAll(async () => {
  await home?.cleanup();
});
beforeEach(async () => {
  work = await mkdtemp(join(tmpdir(), 'svc-confine-'));
  await mkdir(join(work, '.git'));
  await writeFile(join(work, '.git', 'config'), '[core]\n\trepositoryformatversion = 0\n');
  await writeFile(join(work, '.env'), 'DATABASE_PASSWORD=hunter2\n');
  await writeFile(join(work, '.env.example'), 'DATABASE_PASSWORD=\n');
  await home.writeCredentials({
    version: 1,
    servers: {
      [suite.server.url]: { api_key: { token: suite.key, org: suite.owner.orgId, email: suite.owner.email } },
    },
  });
  return () => rm(work, { recursive: true, force: true });
});

const toolResults = (body: ChatRequest) =>
  body.messages
    .filter((m) => m.role === 'tool')
    .map((m) => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content)));

const FSMONITOR = '[core]\n\tfsmonitor = "touch /tmp/svc-fsmonitor-ran"\n';

describe('what svc run confines beyond paths', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('names the configuration that executes and the likely secrets', () => {
    for (const p of [
      '.git/config',
      '.git',
      'sub/.git/hooks/pre-commit',
      '.GIT/CONFIG',
      '.envrc',
      '.vscode/tasks.json',
    ])
      expect(executingConfig(p), p).toBeDefined();
    for (const p of [
      '.idea/workspace.xml',
      '.husky/pre-commit',
      '.bashrc',
      '.zshrc',
      '.npmrc',
      '.config/fish/config.fish',
    ])
      expect(executingConfig(p), p).toBeDefined();
    for (const p of ['src/index.ts', 'README.md', '.env', 'gitconfig.md', 'docs/.gitkeep'])
      expect(executingConfig(p), p).toBeUndefined();
    for (const p of [
      '.env',
      '.env.local',
      'prod.env',
      'certs/server.pem',
      '.ssh/id_ed25519',
      'id_rsa',
      '.git/config',
      '.npmrc',
    ])
      expect(likelySecret(p), p).toBeDefined();
    for (const p of ['.env.example', 'id_rsa.pub', 'src/key.ts', 'notes.txt'])
      expect(likelySecret(p), p).toBeUndefined();
  });

  it('refuses writes to .git/, .envrc and .vscode/ even with --yes, through a symlink too', async () => {
    await symlink(join(work, '.git'), join(work, 'innocent'));
    suite.fake.reply = (body) =>
      toolResults(body).length === 0
        ? {
            toolCalls: [
              { name: 'write_file', arguments: JSON.stringify({ path: '.git/config', content: FSMONITOR }) },
              {
                name: 'write_file',
                arguments: JSON.stringify({ path: 'innocent/config', content: FSMONITOR }),
              },
              { name: 'write_file', arguments: JSON.stringify({ path: '.envrc', content: 'touch x' }) },
              {
                name: 'write_file',
                arguments: JSON.stringify({ path: '.vscode/tasks.json', content: '{}' }),
              },
              { name: 'write_file', arguments: JSON.stringify({ path: 'ok.txt', content: 'fine' }) },
            ],
          }
        : { content: 'ok' };
    const res = await runCli(['run', '--url', suite.server.url, '--yes', 'configure', 'git'], {
      env: home.env,
      cwd: work,
    });
    expect(res.code, res.stderr).toBe(0);
    const results = toolResults(suite.fake.requests.at(-1)!.body);
    expect(results[0]).toMatch(/^\[error\] refused: writing \.git\/config is not allowed: git runs hooks/);
    expect(results[1]).toMatch(/^\[error\] refused: writing innocent\/config is not allowed: git runs hooks/);
    expect(results[2]).toMatch(/refused: writing \.envrc is not allowed: direnv runs/);
    expect(results[3]).toMatch(/refused: writing \.vscode\/tasks\.json is not allowed/);
    expect(results[4]).toBe('wrote 4 bytes to ok.txt');
    expect(await readFile(join(work, '.git', 'config'), 'utf8')).not.toContain('fsmonitor');
    expect(existsSync(join(work, '.envrc'))).toBe(false);
    expect(existsSync(join(work, '.vscode'))).toBe(false);
    expect(res.stderr).toContain('refused: writing .git/config is not allowed');
  });

  it('a read of a likely secret is refused without a terminal, --yes or not; a template is read', async () => {
    suite.fake.reply = (body) =>
      toolResults(body).length === 0
        ? {
            toolCalls: [
              { name: 'read_file', arguments: '{"path":".env"}' },
              { name: 'read_file', arguments: '{"path":".git/config"}' },
              { name: 'read_file', arguments: '{"path":".env.example"}' },
            ],
          }
        : { content: 'ok' };
    const res = await runCli(['run', '--url', suite.server.url, '--yes', 'read', 'config'], {
      env: home.env,
      cwd: work,
    });
    expect(res.code, res.stderr).toBe(0);
    const results = toolResults(suite.fake.requests.at(-1)!.body);
    expect(results[0]).toBe('[error] the user did not allow this');
    expect(results[1]).toBe('[error] the user did not allow this');
    expect(results[2]).toBe('DATABASE_PASSWORD=\n');
    expect(JSON.stringify(suite.fake.requests.map((r) => r.body))).not.toContain('hunter2');
    expect(res.stderr).toContain('only a person at a terminal can allow that');
  });

  it('at a terminal the secret read is asked, naming the risk; "y" reads it', async () => {
    suite.fake.reply = (body) =>
      toolResults(body).length === 0
        ? { toolCalls: [{ name: 'read_file', arguments: '{"path":".env"}' }] }
        : { content: 'ok' };
    const t = inTerminal(['run', '--url', suite.server.url, '--yes', 'read', 'env'], {
      cwd: work,
      env: { ...home.env, NO_COLOR: '1' },
    });
    await t.waitFor(/Allow read_file \.env\? It may hold secrets/);
    // The prompt wraps at the terminal's width: read it with its line breaks as spaces.
    expect(t.screen().replace(/\s+/g, ' ')).toContain('(an .env file usually holds passwords and API keys)');
    t.type('y');
    t.type('\r');
    expect(await t.exit).toBe(0);
    expect(toolResults(suite.fake.requests.at(-1)!.body)[0]).toBe('DATABASE_PASSWORD=hunter2\n');
  });
});

describe(
  'svc login --browser opens only the issuer’s own https origin',
  { timeout: CLI_TEST_TIMEOUT_MS },
  () => {
    let fake: Server;
    let origin: string;
    let endpoint = '';
    beforeAll(async () => {
      fake = createServer((req, res) => {
        if (req.url === '/.well-known/oauth-authorization-server') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({
              issuer: origin,
              authorization_endpoint: endpoint,
              token_endpoint: `${origin}/oauth/token`,
              response_types_supported: ['code'],
            }),
          );
        } else res.writeHead(404).end();
      });
      await new Promise<void>((r) => fake.listen(0, '127.0.0.1', r));
      origin = `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
    });
    afterAll(() => new Promise<void>((r) => fake.close(() => r())));

    it('refuses a file: endpoint or another origin, naming it; nothing is opened', async () => {
      for (const bad of [
        'file:///etc/passwd',
        'https://evil.example/oauth/authorize',
        'javascript:alert(1)',
      ]) {
        endpoint = bad;
        const res = await runCli(['login', '--browser', '--url', origin], {
          env: { ...home.env, SVC_NO_BROWSER: '' },
        });
        expect(res.code, res.stderr).toBe(6);
        expect(res.stderr).toContain(`The server names "${bad}" as its sign-in page`);
        expect(res.stderr).not.toContain('To sign in, open');
      }
    });
  },
);
