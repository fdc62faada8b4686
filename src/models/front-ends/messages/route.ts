import type { Deps } from '../../../deps.js';
import type { FrontEnd } from '../../call.js';
import type { ModelHttpRequest } from '../../admission/admission.js';
import { messagesRequest, parseMessagesRequest } from './schema.js';
import { toChatRequest } from './translate.js';
import { messagesWriter } from './writer.js';

// POST /v1/messages (Anthropic Messages API): the third front-end of the one model call
// (src/models/call.ts), with the same credentials, rules and billing as chat. Errors take Anthropic's
// shape (src/http/error-middleware.ts, surface `anthropic`).

export const MESSAGES_PATH = '/v1/messages';

/** Mounted with the other front-ends by the model routes' table (src/models/entry.ts). */
export function messagesFrontEnd(deps: Deps): FrontEnd {
  return {
    intake: {
      quick(body) {
        const parsed = messagesRequest.safeParse(body);
        return parsed.success ? toChatRequest(parsed.data) : null;
      },
      full: (body) => toChatRequest(parseMessagesRequest(body)),
    },
    writer: () => messagesWriter(deps),
  };
}

/**
 * Anthropic's clients send their key in `x-api-key` (Claude Code and the SDKs' `apiKey`); svc reads
 * credentials from `Authorization: Bearer`, so the key is read as that bearer when no Authorization
 * header is sent. The first step of POST /v1/messages, before the admission reads the credential.
 */
export function apiKeyAsBearer(req: ModelHttpRequest) {
  const key = req.headers['x-api-key'];
  if (req.headers.authorization === undefined && typeof key === 'string' && key)
    req.headers.authorization = `Bearer ${key}`;
}
