import { describe, expect, it } from 'vitest';
import { openApiDocument } from '../../src/openapi/document.js';
import { ERROR_CATALOGUES } from '../../src/openapi/error-codes.js';
import { OAuthProtocolError } from '../../oauth/params.js';

// One error catalogue per domain, in one spelling (docs/decisions/0086-error-catalogues.md), and the API
// document's error responses built from them.

type Operation = { responses: Record<string, { description: string }> };
const operation = (path: string, method: string) =>
  (openApiDocument().paths as Record<string, Record<string, Operation>>)[path]![method]!;

describe('error catalogues', () => {
  it('spell every code UPPER_SNAKE, or lower case only where a standard or the contract does', () => {
    const misspelt: string[] = [];
    for (const [domain, catalogue] of Object.entries(ERROR_CATALOGUES)) {
      for (const [code, entry] of Object.entries(catalogue)) {
        const ok = entry.spelledBy ? /^[a-z][a-z0-9_]*$/.test(code) : /^[A-Z][A-Z0-9_]*$/.test(code);
        if (!ok) misspelt.push(`${domain}: ${code}`);
        expect(entry.status).toBeGreaterThanOrEqual(400);
        expect(entry.message.length).toBeGreaterThan(0);
      }
    }
    expect(misspelt).toEqual([]);
  });

  it('give a domain error its status from the catalogue', () => {
    expect(new OAuthProtocolError('invalid_client', 'x').status).toBe(401);
    expect(new OAuthProtocolError('invalid_grant', 'x').status).toBe(400);
  });

  it('list the codes of each status in the document, as the surface renders them', () => {
    const token = operation('/oauth/token', 'post').responses;
    expect(token['400']!.description).toContain('`invalid_grant`');
    expect(token['400']!.description).toContain('`invalid_request`');
    expect(token['400']!.description).not.toContain('VALIDATION_ERROR');
    expect(token['503']!.description).toContain('`temporarily_unavailable`');
    const project = operation('/v1/projects/{project_id}', 'get').responses;
    expect(project['404']!.description).toContain('`NOT_FOUND`');
    expect(project['403']!.description).toContain('`NOT_A_MEMBER`');
    expect(project['401']!.description).toContain('`INVALID_TOKEN`');
    expect(project['403']!.description).toContain('`insufficient_scope`');
    const models = operation('/v1/models', 'get').responses;
    expect(models['401']!.description).toContain('`invalid_token`');
    // The model routes list the model call's codes as they say them: lower case (src/models/errors.ts).
    const chat = operation('/v1/chat/completions', 'post').responses;
    expect(chat['429']!.description).toContain('`concurrency_limit`');
    expect(chat['429']!.description).toContain('`rate_limit_exceeded`');
    expect(chat['403']!.description).toContain('`org_mismatch`');
    expect(chat['403']!.description).toContain('`viewer_cannot_spend`');
    expect(chat['403']!.description).not.toContain('ORG_MISMATCH');
  });
});
