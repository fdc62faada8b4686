import { renderError } from '../../http/error-middleware.js';
import type { CallWriter, FrontEnd } from '../call.js';
import { chatIntake } from '../admission/chat-admission.js';
import type { ChatRequest } from '../schema.js';

// POST /v1/chat/completions (CONTRACT §9): the first front-end of the one model call (call.ts). The body
// is the internal request itself (allow-listed: schema.ts), and the provider's answer goes out as it came
// (model forced): the JSON completion, or its chunks as `data:` events ending with `data: [DONE]`.

export const CHAT_PATH = '/v1/chat/completions';

/** Mounted with the other front-ends by the model routes' table (src/models/entry.ts). */
export const chatFrontEnd: FrontEnd = { intake: chatIntake, writer: (request) => chatWriter(request) };

function chatWriter(request: ChatRequest): CallWriter {
  // svc always asks the provider for usage on a stream; the client gets the usage chunk only when it asked.
  const wantsUsage = !!request.stream_options?.include_usage;
  return {
    json: (completion) => completion,
    open: () => '',
    chunk(chunk) {
      if (!wantsUsage) {
        if (chunk.usage && (!chunk.choices || chunk.choices.length === 0)) return '';
        delete chunk.usage;
      }
      return `data: ${JSON.stringify(chunk)}\n\n`;
    },
    end: () => 'data: [DONE]\n\n',
    // An OpenAI error event and no [DONE] (the OpenAI SDKs raise it).
    fail: (err) => `data: ${JSON.stringify(renderError(err, 'openai'))}\n\n`,
  };
}
