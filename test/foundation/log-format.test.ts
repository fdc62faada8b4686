import { PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, resolveLogFormat } from '../../src/log.js';
import { loadConfig } from '../../src/config.js';

// LOG_FORMAT: JSON for machines, one readable line per request for people, and auto choosing between
// them (pretty only on a terminal in DEV_MODE). Real pino and pino-pretty, writing to a stream.

function capture(format: 'json' | 'pretty') {
  const out = new PassThrough();
  let text = '';
  out.on('data', (d) => (text += String(d)));
  return { log: createLogger('info', format, out), text: () => text };
}

const requestLine = {
  req: { id: 'req-1', method: 'GET', path: '/v1/clients' },
  res: { status: 200 },
  responseTime: 3,
};

describe('log format', () => {
  it('json: one object a line, secrets redacted', () => {
    const { log, text } = capture('json');
    log.info(requestLine, 'request completed');
    log.info({ user: { password: 'hunter2' } }, 'x');
    const lines = text()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({ msg: 'request completed', req: requestLine.req, res: { status: 200 } });
    expect(text()).not.toContain('hunter2');
  });

  it('pretty: one readable line per request, secrets still redacted', () => {
    const { log, text } = capture('pretty');
    log.info(requestLine, 'request completed');
    log.info({ user: { password: 'hunter2' } }, 'signed in');
    const lines = text().trim().split('\n');
    expect(lines[0]).toMatch(/INFO.*GET \/v1\/clients 200 3 ms {2}req-1$/);
    expect(lines[0]).not.toMatch(/[{}]/);
    expect(text()).toContain('signed in');
    expect(text()).not.toContain('hunter2');
  });

  it('auto: pretty only on a terminal in DEV_MODE; LOG_FORMAT is validated', () => {
    expect(resolveLogFormat('auto', true, true)).toBe('pretty');
    expect(resolveLogFormat('auto', true, false)).toBe('json');
    expect(resolveLogFormat('auto', false, true)).toBe('json');
    expect(resolveLogFormat('json', true, true)).toBe('json');
    expect(resolveLogFormat('pretty', false, false)).toBe('pretty');
    expect(loadConfig({}).logFormat).toBe('auto');
    expect(() => loadConfig({ LOG_FORMAT: 'xml' })).toThrow(/LOG_FORMAT/);
    expect(() => loadConfig({ METRICS_TOKEN: 'short' })).toThrow(/METRICS_TOKEN/);
  });
});
