import { describe, expect, it } from 'vitest';
import { targetAttributes } from '../../src/telemetry/server-span.js';

// A request's path and query as its server span records them (docs/operations.md, Traces: never a
// share link's token, never a query value), split without parsing the target as a URL.

describe('a request target in its server span', () => {
  it('keeps the path and the query parameter names, never their values', () => {
    expect(targetAttributes('/v1/clients?limit=5&cursor=abc')).toEqual({
      'url.path': '/v1/clients',
      'url.query': 'limit=REDACTED&cursor=REDACTED',
    });
    expect(targetAttributes('/oauth/authorize?code=secret-code')['url.query']).toBe('code=REDACTED');
  });

  it('has no url.query without a query, or with an empty one', () => {
    expect(targetAttributes('/v1/chat/completions')).toEqual({ 'url.path': '/v1/chat/completions' });
    expect(targetAttributes('/v1/chat/completions?')).toEqual({ 'url.path': '/v1/chat/completions' });
  });

  it("replaces a share link's token wherever the segment stands", () => {
    expect(targetAttributes('/s/tok_secret')['url.path']).toBe('/s/:token');
    expect(targetAttributes('/s/tok_secret/raw?x=1')).toEqual({
      'url.path': '/s/:token/raw',
      'url.query': 'x=REDACTED',
    });
    expect(targetAttributes('/a/../s/tok_secret')['url.path']).toBe('/a/../s/:token');
    expect(JSON.stringify(targetAttributes('http://host/s/tok_secret'))).not.toContain('tok_secret');
  });
});
