// Server-sent events read with fetch(): an EventSource cannot send the
// Authorization header, so the console reads the stream itself.

/**
 * @typedef {Object} SseEvent
 * @property {string} event the `event:` field, "message" when absent
 * @property {string} data the `data:` lines, joined with "\n"
 * @property {string|null} id the `id:` field
 */

/**
 * Reads a `text/event-stream` body to its end, calling `onEvent` for each
 * event (comments such as `: waiting` are skipped).
 * @param {Response} response
 * @param {(e: SseEvent) => void} onEvent
 */
export async function readEvents(response, onEvent) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let fields = { event: "", data: [], id: null };
  const dispatch = () => {
    if (fields.data.length > 0) {
      onEvent({ event: fields.event || "message", data: fields.data.join("\n"), id: fields.id });
    }
    fields = { event: "", data: [], id: null };
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let newline;
    while ((newline = buffer.search(/\r\n|\n|\r/)) >= 0) {
      // A "\r" that ends the buffer may be the first half of "\r\n".
      if (buffer[newline] === "\r" && newline === buffer.length - 1) break;
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
      if (line === "") {
        dispatch();
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (name === "data") fields.data.push(val);
        else if (name === "event") fields.event = val;
        else if (name === "id") fields.id = val;
      }
    }
  }
  dispatch();
}
