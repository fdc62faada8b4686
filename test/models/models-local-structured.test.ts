import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { registerSchema, validate } from '@hyperjump/json-schema/draft-2020-12';
import type { TestServer } from '../helpers/server.js';
import type { TestUser } from '../helpers/fixtures.js';
import { localModelSuite } from '../helpers/model-suite.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';

// Structured output on the built-in model: `response_format` json_object and json_schema
// answer JSON that the OpenAI SDK's own parser accepts, that validates against the caller's schema (checked
// by a maintained validator, not by svc's code), deterministically, and billed like any answer.

let server: TestServer;
let owner: TestUser;
let openai: OpenAI;

const suite = localModelSuite(50_000);
beforeAll(() => void ({ server, owner, openai } = suite));

const user = (content: string) => [{ role: 'user' as const, content }];

const Recipe = z.object({
  name: z.string(),
  servings: z.number().int().min(1).max(12),
  difficulty: z.enum(['easy', 'medium', 'hard']),
  ingredients: z.array(z.object({ item: z.string(), grams: z.number().nullable() })).min(2),
  vegetarian: z.boolean(),
});

/** Validates `value` against a JSON Schema with @hyperjump/json-schema (2020-12). */
async function schemaAccepts(id: string, schema: Record<string, unknown>, value: unknown) {
  const uri = `https://svc.test/schemas/${id}`;
  registerSchema({ $schema: 'https://json-schema.org/draft/2020-12/schema', ...schema, $id: uri });
  return (await validate(uri, value as never)).valid;
}

describe('svc-local structured output', () => {
  it('answers a zod schema through the SDK parser, the same way every time, billed by its word count', async () => {
    const before = await orgBalanceCredits(server.deps.db, owner.orgKey);
    const req = {
      model: 'svc-local',
      messages: user('A soup recipe, please'),
      response_format: zodResponseFormat(Recipe, 'recipe'),
    };
    const a = await openai.chat.completions.parse(req);
    const b = await openai.chat.completions.parse(req);
    const parsed = a.choices[0]!.message.parsed;
    // The SDK ran Recipe.parse on the answer: a value that breaks the schema would have thrown here.
    expect(parsed).not.toBeNull();
    expect(Recipe.safeParse(parsed).success).toBe(true);
    expect(parsed!.ingredients.length).toBeGreaterThanOrEqual(2);
    expect(b.choices[0]!.message.content).toBe(a.choices[0]!.message.content);
    expect(a.choices[0]!.finish_reason).toBe('stop');
    // One token per word of the indented JSON (svc-local's tokenizer), each call billed from its usage.
    const words = a.choices[0]!.message.content!.split(/\s+/).filter(Boolean).length;
    expect(a.usage!.completion_tokens).toBe(words);
    await expect.poll(() => orgBalanceCredits(server.deps.db, owner.orgKey)).toBeLessThan(before);
  });

  it('validates against schemas with patterns, formats, $refs and combinators', async () => {
    const schema = {
      type: 'object',
      properties: {
        code: { type: 'string', pattern: '^[A-Z]{3}-\\d{4}$' },
        count: { type: 'integer', multipleOf: 7, minimum: 10 },
        contact: { type: 'string', format: 'email' },
        items: { type: 'array', items: { $ref: '#/$defs/item' }, minItems: 1 },
        either: { anyOf: [{ type: 'string', maxLength: 3 }, { type: 'null' }] },
        fixed: { const: 'yes' },
      },
      required: ['code', 'count', 'contact', 'items', 'either', 'fixed'],
      additionalProperties: false,
      $defs: {
        item: {
          type: 'object',
          properties: { ok: { type: 'boolean' }, tags: { type: 'array', items: { type: 'string' } } },
          required: ['ok', 'tags'],
          additionalProperties: false,
        },
      },
    };
    const res = await openai.chat.completions.create({
      model: 'svc-local',
      messages: user('Fill the form'),
      response_format: { type: 'json_schema', json_schema: { name: 'form', schema, strict: true } },
    });
    const value: unknown = JSON.parse(res.choices[0]!.message.content!);
    expect(await schemaAccepts('form', schema, value)).toBe(true);
  });

  it('streams the same JSON as the whole answer, for json_schema and json_object', async () => {
    const formats = [zodResponseFormat(Recipe, 'recipe'), { type: 'json_object' as const }];
    for (const response_format of formats) {
      const req = { model: 'svc-local', messages: user('Soup again'), response_format };
      const whole = await openai.chat.completions.create(req);
      const stream = await openai.chat.completions.create({ ...req, stream: true });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text).toBe(whole.choices[0]!.message.content);
      expect(() => JSON.parse(text) as unknown).not.toThrow();
    }
    const obj = await openai.chat.completions.create({
      model: 'svc-local',
      messages: user('Reply in JSON'),
      response_format: { type: 'json_object' },
    });
    expect(JSON.parse(obj.choices[0]!.message.content!)).toEqual({
      reply: expect.stringContaining('Reply in JSON') as unknown,
    });
  });

  it('refuses a schema whose least value is huge, and a malformed format, with 400 before any charge', async () => {
    const before = await orgBalanceCredits(server.deps.db, owner.orgKey);
    const bombs = [
      { type: 'array', items: { type: 'string' }, minItems: 10_000_000 },
      { type: 'string', minLength: 100_000_000 },
      { type: 'string', pattern: 'a{1000000}' },
      {
        type: 'array',
        minItems: 100,
        items: { type: 'array', minItems: 100, items: { type: 'array', minItems: 100, items: {} } },
      },
    ];
    for (const schema of bombs) {
      const err = await openai.chat.completions
        .create({
          model: 'svc-local',
          messages: user('x'),
          response_format: { type: 'json_schema', json_schema: { name: 'bomb', schema } },
        })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.BadRequestError);
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('response_format');
    }
    const malformed = await openai.chat.completions
      .create({
        model: 'svc-local',
        messages: user('x'),
        response_format: { type: 'xml' } as never,
      })
      .catch((e: unknown) => e);
    expect(malformed).toBeInstanceOf(OpenAI.BadRequestError);
    expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBe(before);
  });
});
