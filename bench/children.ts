import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

// Benchmarks run each side (svc, its peer, a fake upstream) in a process of its own, so that one side's
// event loop never slows the other's. A child announces readiness with one line on stdout.

export const repoRoot = fileURLToPath(new URL('..', import.meta.url));

const READY = /BENCH_READY (.*)\n/;

/** Called in a child once it serves: hands `value` (URLs, tokens) to the parent. */
export function announce(value: unknown): void {
  process.stdout.write(`BENCH_READY ${JSON.stringify(value)}\n`);
}

/**
 * Spawns `node <args>` with `env` added and resolves with the child and what it announced. A line
 * matching `readyPattern` (group 1: JSON, optional) counts as ready; exit before that rejects.
 */
export function startChild(
  args: string[],
  env: Record<string, string>,
  readyPattern: RegExp = READY,
): Promise<{ child: ChildProcess; info: any }> {
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
      if (m) resolve({ child, info: m[1] ? JSON.parse(m[1]) : {} });
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
