// `node --import tsx bench/proxy-tricks.ts`: CPU A/B of three of the chat path's speed tricks against the
// plain way each replaced (the figure beside every trick kept, docs/models.md). CPU
// time over N operations (process.cpuUsage: every thread of the process) is far less sensitive to a
// loaded machine than throughput; rounds are printed so a reader sees the spread (the first is warm-up).
import { generateKeyPairSync, sign, webcrypto } from 'node:crypto';
import { SseDecoder } from '../src/models/upstream/sse.js';
import { promptTokenCount } from '../src/models/metering/tokens.js';
import type { ChatMessage } from '../src/models/upstream/types.js';

const ROUNDS = 4;

async function cpuPerOp(n: number, op: () => unknown): Promise<number> {
  const t0 = process.cpuUsage();
  for (let i = 0; i < n; i++) await op();
  const u = process.cpuUsage(t0);
  return (u.user + u.system) / n;
}
const us = (v: number) => `${v.toFixed(1)} µs`;

// 1. The provider's SSE decoded as bytes, only the `data:` lines turned into strings (src/models/upstream/sse.ts),
//    against a streaming TextDecoder and a string buffer split into lines: one answer of the bench's fake
//    provider (23 events), arriving in one socket read or one event per read.
const base = {
  id: 'chatcmpl-1',
  object: 'chat.completion.chunk',
  created: 1764000000,
  model: 'm-2026-01-01',
};
const ev = (o: object) => `data: ${JSON.stringify({ ...base, ...o })}\n\n`;
const words =
  'The quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps over the lazy dog.'.match(
    /\s*\S+/g,
  ) ?? [];
const sse =
  ev({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }) +
  words.map((w) => ev({ choices: [{ index: 0, delta: { content: w }, finish_reason: null }] })).join('') +
  ev({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) +
  ev({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 20, total_tokens: 30 } }) +
  'data: [DONE]\n\n';
const reads = {
  'one read': [Buffer.from(sse)],
  'one event a read': sse.split(/(?<=\n\n)/).map((p) => Buffer.from(p)),
};

class PlainDecoder {
  #decoder = new TextDecoder();
  #buffer = '';
  #data: string[] = [];
  constructor(private readonly onEvent: (data: string) => void) {}
  push(chunk: Buffer) {
    this.#buffer += this.#decoder.decode(chunk, { stream: true });
    const lines = this.#buffer.split(/\r?\n/);
    this.#buffer = lines.pop() ?? '';
    for (const line of lines) {
      if (line === '') this.end();
      else if (line.startsWith('data:')) this.#data.push(line.slice(line[5] === ' ' ? 6 : 5));
    }
  }
  end() {
    if (this.#data.length) this.onEvent(this.#data.join('\n'));
    this.#data = [];
  }
}

// 2. The prompt counted only when a call's usage never came (src/models/metering/metered.ts promptEstimate),
//    against counting it for every call: the bench's prompt, and an agent's 14 KB conversation.
const para =
  'The quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps over the lazy dog. ';
const prompts: Record<string, ChatMessage[]> = {
  'bench prompt (20 B)': [{ role: 'user', content: 'Tell me about foxes.' }],
  'agent prompt (14 KB)': [
    { role: 'system', content: para.repeat(40) },
    ...Array.from({ length: 20 }, (_, i) => ({
      role: i % 2 ? 'assistant' : 'user',
      content: para.repeat(5),
    })),
  ],
};

// 3. The outcome's ES256 signature with node:crypto, synchronously (src/models/metering/outcome.ts), against
//    WebCrypto's awaited subtle.sign (its work on the thread pool is counted: cpuUsage is per process).
const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const webKey = await webcrypto.subtle.importKey(
  'pkcs8',
  privateKey.export({ format: 'der', type: 'pkcs8' }),
  { name: 'ECDSA', namedCurve: 'P-256' },
  false,
  ['sign'],
);
const signingInput = Buffer.from(
  'eyJhbGciOiJFUzI1NiJ9.' + Buffer.from(JSON.stringify(base)).toString('base64url'),
);

for (let round = 0; round < ROUNDS; round++) {
  const lines: string[] = [];
  for (const [name, pieces] of Object.entries(reads)) {
    const decode = (make: (on: () => void) => { push(b: Buffer): void; end(): void }) => () => {
      const d = make(() => {});
      for (const p of pieces) d.push(p);
      d.end();
    };
    const bytes = await cpuPerOp(
      20_000,
      decode((on) => new SseDecoder(on)),
    );
    const plain = await cpuPerOp(
      20_000,
      decode((on) => new PlainDecoder(on)),
    );
    lines.push(`SSE, ${name}: bytes ${us(bytes)} / plain ${us(plain)} per answer`);
  }
  for (const [name, messages] of Object.entries(prompts))
    lines.push(
      // The tokenizer's count, taken only for a call whose provider's usage never came (CONTRACT §9).
      `prompt count (o200k_base), ${name}: ${us(await cpuPerOp(500, () => promptTokenCount({ messages })))} per call`,
    );
  const sync = await cpuPerOp(3_000, () =>
    sign('sha256', signingInput, { key: privateKey, dsaEncoding: 'ieee-p1363' }),
  );
  const web = await cpuPerOp(3_000, () =>
    webcrypto.subtle.sign({ name: 'ECDSA', hash: 'SHA-256' }, webKey, signingInput),
  );
  lines.push(`outcome signature: node:crypto ${us(sync)} / WebCrypto ${us(web)}`);
  process.stdout.write(`round ${round}${round === 0 ? ' (warm-up)' : ''}\n  ${lines.join('\n  ')}\n`);
}
