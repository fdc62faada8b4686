// Server-sent events as svc's chat stream sends them (WHATWG HTML §9.2): `data:` lines, and the comment
// line `: x-svc-outcome <jws>` that carries the call's signed outcome (docs/models.md).

export interface SseEvent {
  data?: string;
  comment?: string;
}

export async function* readSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseEvent> {
  const decoder = new TextDecoder();
  let buffer = '';
  let data: string[] = [];
  for await (const bytes of body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end: number;
    while ((end = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const lineText = buffer.slice(0, end);
      buffer = buffer.slice(end + (buffer.startsWith('\r\n', end) ? 2 : 1));
      if (lineText === '') {
        if (data.length) yield { data: data.join('\n') };
        data = [];
      } else if (lineText.startsWith(':')) {
        yield { comment: lineText.slice(1).trimStart() };
      } else if (lineText.startsWith('data:')) {
        data.push(lineText.slice(5).replace(/^ /, ''));
      }
    }
  }
  if (data.length) yield { data: data.join('\n') };
}
