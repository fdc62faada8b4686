import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { nodeEntry } from './entry.js';

// svc as its own process (src/main.ts, as `npm start` runs it: compiled when the build is current, entry.ts), for what only a process shows: that it
// did not exit, what it does on SIGTERM, what a kill -9 leaves behind, its memory and descriptors.

export interface ChildSvc {
  url: string;
  port: number;
  proc: ChildProcess;
  /** Settles with the exit code (or the signal's name) once the process has ended. */
  exited: Promise<number | string>;
  /** Whether the process is still running. */
  alive(): boolean;
  /** Resident memory in bytes and open file descriptors, read from /proc. */
  usage(): { rssBytes: number; fds: number };
  /** What the process wrote so far, stdout and stderr (its log at LOG_LEVEL, and any crash). */
  output(): string;
  /** SIGKILL, then waits for the exit. */
  kill(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Starts `src/main.ts` with `env` (DATABASE_URL among it) and resolves once it listens. */
export async function startChildSvc(env: Record<string, string>): Promise<ChildSvc> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const proc = spawn(process.execPath, nodeEntry('src/main.ts'), {
    cwd: process.cwd(),
    env: {
      PATH: process.env.PATH ?? '',
      PORT: String(port),
      HOST: '127.0.0.1',
      BASE_URL: url,
      LOG_LEVEL: 'warn',
      RATE_LIMIT_IP_PER_MIN: '1000000',
      DATA_DIR: 'memory://',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  proc.stderr.on('data', (d) => (err += String(d)));
  proc.stdout.on('data', (d) => (err += String(d)));
  const exited = new Promise<number | string>((resolve) =>
    proc.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')),
  );
  await new Promise<void>((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => {
      out += String(d);
      if (out.includes('svc is running')) resolve();
    });
    void exited.then((code) => reject(new Error(`svc exited ${code} before listening:\n${err}`)));
  });
  const child: ChildSvc = {
    url,
    port,
    proc,
    exited,
    alive: () => proc.exitCode === null && proc.signalCode === null,
    usage() {
      const status = readFileSync(`/proc/${proc.pid}/status`, 'utf8');
      const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
      return { rssBytes: rssKb * 1024, fds: readdirSync(`/proc/${proc.pid}/fd`).length };
    },
    output: () => err,
    async kill() {
      if (child.alive()) proc.kill('SIGKILL');
      await exited;
    },
  };
  return child;
}
