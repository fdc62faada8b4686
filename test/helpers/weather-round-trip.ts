import { generateText, jsonSchema, tool, type LanguageModel } from 'ai';

// The AI SDK's two-step tool round trip the Responses suites run (translated and passed through): the
// model asks for `weather`, the SDK runs it ("sunny in Paris") and sends its output back for the answer.
export function weatherRoundTrip(model: LanguageModel) {
  return generateText({
    model,
    prompt: 'Weather in Paris?',
    maxRetries: 0,
    tools: {
      weather: tool({
        description: 'The weather in a city',
        inputSchema: jsonSchema<{ city: string }>({
          type: 'object',
          properties: { city: { type: 'string' } },
          required: ['city'],
        }),
        execute: ({ city }) => Promise.resolve(`sunny in ${city}`),
      }),
    },
    stopWhen: ({ steps }) => steps.length >= 2,
  });
}
