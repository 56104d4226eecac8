// The usage of a streamed answer, read from its bytes as they pass (the stream itself passes
// unchanged): the engine's token counts (chat: `prompt_tokens`, `completion_tokens`; Responses:
// `input_tokens`, `output_tokens`; the last ones seen win, as a stream's final usage is its
// total) and the number of events, for a stream that carries none (a client that did not ask for
// `stream_options.include_usage`, or one that left before the end).
//
// Nothing is allocated per buffer: njs frees nothing a request allocates before it ends, and a
// long stream is tens of thousands of buffers (decoding each one's text, as before, kept about
// three times the stream's bytes for its whole life). The buffer is searched with indexOf
// (native); a name or number cut between two buffers is found in a window of the previous
// buffer's end and the next one's start, copied into two small buffers made once per stream.
//
// Pure: no nginx objects; tests/gateway/js runs it on node.

const PROMPT = [Buffer.from('"prompt_tokens"'), Buffer.from('"input_tokens"')];
const COMPLETION = [Buffer.from('"completion_tokens"'), Buffer.from('"output_tokens"')];
const EVENT = Buffer.from('\ndata:');
// Longer than any name and its number: a usage member cut anywhere is whole in the window.
const TAIL = 64;

function newUsage() {
    // The stream starts as if after a newline: its first `data:` is an event.
    const u = {events: 0, prompt: -1, completion: -1, tail: Buffer.alloc(TAIL), tailLen: 1, win: Buffer.alloc(2 * TAIL)};
    u.tail[0] = 10;
    return u;
}

// The number after `"name"` at buf[at] (its spaces and colon skipped), or -1 if the buffer ends
// before it does.
function numberAfter(buf, at, end) {
    let i = at;
    let n = 0;
    let digits = 0;
    while (i < end && (buf[i] === 32 || buf[i] === 58)) {
        i++;
    }
    while (i < end && buf[i] >= 48 && buf[i] <= 57) {
        n = n * 10 + buf[i] - 48;
        digits++;
        i++;
    }
    return digits && i < end ? n : -1;
}

// The last value of any of `names` in buf[from, end), or `current`.
function lastOf(names, buf, from, end, current) {
    let found = current;
    let j;
    let at;
    let n;
    for (j = 0; j < names.length; j++) {
        at = buf.indexOf(names[j], from);
        while (at !== -1 && at < end) {
            n = numberAfter(buf, at + names[j].length, end);
            if (n >= 0) {
                found = n;
            }
            at = buf.indexOf(names[j], at + 1);
        }
    }
    return found;
}

// Occurrences of `pattern` in buf that start before `before` and end after `after` (the window's
// seam), or anywhere when both are 0.
function count(pattern, buf, end, before, after) {
    let n = 0;
    let at = buf.indexOf(pattern, 0);
    while (at !== -1 && at + pattern.length <= end) {
        if (!before || (at < before && at + pattern.length > after)) {
            n++;
        }
        at = buf.indexOf(pattern, at + 1);
    }
    return n;
}

// One buffer of the stream.
function readUsage(u, data) {
    const len = data.length;
    let w;
    if (!len) {
        return;
    }
    // The seam: the previous buffer's end and this one's start.
    if (u.tailLen) {
        u.tail.copy(u.win, 0, 0, u.tailLen);
        w = u.tailLen + data.copy(u.win, u.tailLen, 0, Math.min(len, TAIL));
        u.events += count(EVENT, u.win, w, u.tailLen, u.tailLen);
        u.prompt = lastOf(PROMPT, u.win, 0, w, u.prompt);
        u.completion = lastOf(COMPLETION, u.win, 0, w, u.completion);
    }
    u.events += count(EVENT, data, len, 0, 0);
    u.prompt = lastOf(PROMPT, data, 0, len, u.prompt);
    u.completion = lastOf(COMPLETION, data, 0, len, u.completion);
    if (len >= TAIL) {
        data.copy(u.tail, 0, len - TAIL, len);
        u.tailLen = TAIL;
    } else {
        // A short buffer joins what the tail kept.
        w = Math.min(u.tailLen, TAIL - len);
        u.tail.copy(u.win, 0, u.tailLen - w, u.tailLen);
        u.win.copy(u.tail, 0, 0, w);
        data.copy(u.tail, w, 0, len);
        u.tailLen = w + len;
    }
}

// The tokens a stream is charged: its usage when it carried one, else `estimate` (the prompt's)
// and one token per event streamed.
function used(u, estimate) {
    if (u.prompt >= 0 || u.completion >= 0) {
        return Math.max(0, u.prompt) + Math.max(0, u.completion);
    }
    return estimate + u.events;
}

export default {newUsage, readUsage, used};
