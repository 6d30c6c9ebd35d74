/**
 * A Server-Sent Events parser over a fetch body stream (the WHATWG event-stream format: `event:`,
 * `data:` lines joined with newlines, `id:`, comments, any of CRLF/LF/CR as line ends).
 */

export interface SseMessage {
  event: string;
  data: string;
  id?: string;
}

/** Yields the messages of an event stream; cancels the body if the consumer stops early. */
export async function* parseSse(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage> {
  const reader = body.getReader();
  const decoder = new TextDecoder("utf-8");
  let buf = "";
  let event = "";
  let data: string[] = [];
  let id: string | undefined;
  let done = false;
  try {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) {
        buf += decoder.decode();
        done = true;
      } else {
        buf += decoder.decode(chunk.value, { stream: true });
      }
      // Take whole lines only. A trailing CR may be the first half of a CRLF, so keep it.
      for (;;) {
        const m = /\r\n|\n|\r/.exec(buf);
        if (!m) break;
        if (m[0] === "\r" && m.index === buf.length - 1 && !done) break;
        const line = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        if (line === "") {
          if (data.length > 0) {
            const msg: SseMessage = { event: event || "message", data: data.join("\n") };
            if (id !== undefined) msg.id = id;
            yield msg;
          }
          event = "";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon === -1 ? line : line.slice(0, colon);
        let value = colon === -1 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        switch (field) {
          case "event":
            event = value;
            break;
          case "data":
            data.push(value);
            break;
          case "id":
            if (!value.includes("\0")) id = value;
            break;
          default:
            break; // `retry` and unknown fields are ignored
        }
      }
      if (done) break;
    }
    // A stream that ends without a blank line still delivers its last event.
    if (data.length > 0) {
      const msg: SseMessage = { event: event || "message", data: data.join("\n") };
      if (id !== undefined) msg.id = id;
      yield msg;
    }
  } finally {
    if (!done) await reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}
