import type { IncomingMessage, ServerResponse } from 'node:http';
import express from 'express';
import { AppError, errorOf, COMMON_ERRORS } from './errors.js';

// Every JSON body is read through here: express.json with a nesting limit checked on the raw bytes before
// JSON.parse runs. Deep nesting is what makes a body expensive beyond its size (V8 parsed 5 million
// nested `[` of a 10 MB body in 6 s, and every walk after the parse recurses as deep), and no request of
// ours nests anywhere near it: chat tool schemas and MCP arguments stay within a few dozen levels.
// Beyond the limit: 400 VALIDATION_ERROR, rendered in each surface's shape by its error handler.
//

/** The most `{`/`[` levels a JSON body may open, one inside the other. */
export const MAX_JSON_DEPTH = 64;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;

/**
 * True when `json` opens more than `max` levels. One pass; the bodies of strings are skipped by
 * indexOf (native), so a chat history's long contents cost little. Malformed input is not judged here:
 * JSON.parse refuses it next.
 */
export function jsonNestsDeeperThan(json: Buffer, max: number): boolean {
  let depth = 0;
  for (let i = 0; i < json.length; i++) {
    const c = json[i];
    if (c === QUOTE) {
      // The closing quote is the next one not escaped by an odd run of backslashes.
      let end = i;
      for (;;) {
        end = json.indexOf(QUOTE, end + 1);
        if (end < 0) return false;
        let before = end - 1;
        while (json[before] === BACKSLASH) before--;
        if ((end - 1 - before) % 2 === 0) break;
      }
      i = end;
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > max) return true;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      depth--;
    }
  }
  return false;
}

export function nestedTooDeep(): AppError {
  const message = `nested deeper than ${MAX_JSON_DEPTH} levels`;
  return errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', `(root): ${message}`, {
    errors: [{ path: '(root)', message }],
  });
}

type Verify = (req: IncomingMessage, res: ServerResponse, buf: Buffer, encoding: string) => void;

/** express.json with the nesting limit; `verify` runs after the limit (e.g. to keep the raw bytes). */
export function jsonBody(options: { limit: string; verify?: Verify }) {
  return express.json({
    limit: options.limit,
    verify: (req, res, buf, encoding) => {
      // RFC 8259 §8.1: JSON between systems is UTF-8. The scan reads UTF-8 bytes (no byte of a multi-byte
      // character is a quote or a bracket); in UTF-16 or UTF-7 it could be led astray, so they are refused.
      if (encoding !== 'utf-8')
        throw errorOf(COMMON_ERRORS, 'UNSUPPORTED_ENCODING', 'JSON bodies must be UTF-8 (RFC 8259 §8.1)');
      // body-parser keeps an error's own status (400), where it would otherwise answer 403.
      if (jsonNestsDeeperThan(buf, MAX_JSON_DEPTH)) throw nestedTooDeep();
      options.verify?.(req, res, buf, encoding);
    },
  });
}
