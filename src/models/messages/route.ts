import type { ServerResponse } from 'node:http';
import type { Deps } from '../../deps.js';
import type { Auth } from '../../auth/principal.js';
import { modelCall, type FrontEnd } from '../call.js';
import type { ChatHttpRequest } from '../chat-admission.js';
import { messagesRequest, parseMessagesRequest } from './schema.js';
import { toChatRequest } from './translate.js';
import { messagesWriter } from './writer.js';

// POST /v1/messages (Anthropic Messages API): the third front-end of the one model call
// (src/models/call.ts), with the same credentials, rules and billing as chat. Errors take Anthropic's
// shape (src/http/error-middleware.ts, surface `anthropic`).

export const MESSAGES_PATH = '/v1/messages';

export function messagesRoute(deps: Deps, auth: Auth) {
  const frontEnd: FrontEnd = {
    intake: {
      quick(body) {
        const parsed = messagesRequest.safeParse(body);
        return parsed.success ? toChatRequest(parsed.data) : null;
      },
      full: (body) => toChatRequest(parseMessagesRequest(body)),
    },
    writer: () => messagesWriter(deps),
  };
  return (req: ChatHttpRequest, res: ServerResponse) => modelCall(deps, auth, req, res, frontEnd);
}

/**
 * Anthropic's clients send their key in `x-api-key` (Claude Code and the SDKs' `apiKey`); svc reads
 * credentials from `Authorization: Bearer`, so the key is read as that bearer when no Authorization
 * header is sent. Mounted first on POST /v1/messages, before the chat call's steps read the credential.
 */
export function apiKeyAsBearer(req: ChatHttpRequest, _res: ServerResponse, next: () => void) {
  const key = req.headers['x-api-key'];
  if (req.headers.authorization === undefined && typeof key === 'string' && key)
    req.headers.authorization = `Bearer ${key}`;
  next();
}
