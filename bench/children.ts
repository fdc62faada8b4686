import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseAs } from '../test/helpers/json.js';

// Benchmarks run each side (svc, its peer, a fake upstream) in a process of its own, so that one side's
// event loop never slows the other's. A child announces readiness with one line on stdout.

export const repoRoot = fileURLToPath(new URL('..', import.meta.url));

const READY = /BENCH_READY (.*)\n/;

/** What the proxy bench's svc child announces (bench/proxy.ts, also run by bench/cpu.ts). */
export interface ProxySvcInfo {
  url: string;
  token: string;
  /** Tokens of further organizations (BENCH_ORGS), to spread the load over. */
  spread: string[];
  /** A key of one more organization with an RPM and a TPM limit set (never reached). */
  limited: string;
  storage: string;
}

/** Called in a child once it serves: hands `value` (URLs, tokens) to the parent. */
export function announce(value: unknown): void {
  process.stdout.write(`BENCH_READY ${JSON.stringify(value)}\n`);
}

/**
 * Spawns `node <args>` with `env` added and resolves with the child and what it announced. A line
 * matching `readyPattern` (group 1: JSON, optional) counts as ready; exit before that rejects.
 */
export function startChild<Info = { url: string }>(
  args: string[],
  env: Record<string, string>,
  readyPattern: RegExp = READY,
): Promise<{ child: ChildProcess; info: Info }> {
  const child = spawn(process.execPath, args, {
    cwd: repoRoot,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = readyPattern.exec(out);
      // A child that announces nothing (a foreign server's ready line) has no info to read.
      if (m) resolve({ child, info: m[1] ? parseAs<Info>(m[1]) : ({} as Info) });
    });
    child.stderr.on('data', (d) => (err += d));
    child.once('exit', (code) =>
      reject(
        new Error(`${args.join(' ')} (${env.BENCH_ROLE ?? 'child'}) exited ${code}: ${err.slice(-2000)}`),
      ),
    );
  });
}

/** SIGTERM, then give the child ten seconds to finish. */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
}
