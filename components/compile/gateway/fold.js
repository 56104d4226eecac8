// The non-streaming answer, folded from the engine's event stream: chat's chunks joined into one
// `chat.completion` shaped like vLLM's non-streaming answer, or the Responses stream's final
// `response`. What is kept is the answer being built and the one unfinished line, never the raw
// stream, and its bytes are counted against the cap (maxResponseBytes).
//
// Pure: no nginx objects (gateway.js's filters feed it buffer by buffer); tests/gateway/js runs
// it on node.

function newFold(kind, maxBytes, since) {
    return {kind: kind, maxBytes: maxBytes, since: since || 0, bytes: 0, events: 0, error: null, tooLarge: false, complete: false,
            sse: newReader(kind === 'responses' ? responsesWanted : null),
            // chat
            head: null, usage: null, choices: {},
            // Responses
            last: null};
}

// What one request costs is what its stream allocates: njs's legacy engine frees nothing before
// the request ends. So the stream is read line by line from its buffers (indexOf on bytes, no
// regular expressions: njs's regex split took 2.4 ms per 1 KiB event, measured), each data line
// decoded once from the bytes (a newline never sits inside a multi-byte character), and the
// Responses events that do not make the answer (every delta) are not decoded at all.
function feed(st, data) {
    if (st.tooLarge || st.error) {
        return;
    }
    st.bytes += data.length;
    if (st.bytes > st.maxBytes) {
        st.tooLarge = true;
        st.sse = newReader(null);
        st.choices = {};
        st.last = null;
        return;
    }
    readBuffer(st.sse, typeof data === 'string' ? Buffer.from(data) : data, function (ev) {
        foldEvent(st, ev);
        return !st.error;
    });
}

// ---- server-sent events: {event, data} from buffers --------------------------------------------

// wanted(name) says whether an event named `name` is decoded (null: every event).
function newReader(wanted) {
    // data: the event's data lines joined (null: none yet; events have one data line, as a rule).
    return {partial: [], name: '', data: null, skip: false, wanted: wanted};
}

// Calls onEvent({event, data}) for every event the buffer completes; stops when it returns false.
function readBuffer(rd, buf, onEvent) {
    let pos = 0;
    while (pos < buf.length) {
        const nl = buf.indexOf(10, pos);
        if (nl < 0) {
            rd.partial.push(buf.subarray(pos));
            return;
        }
        let ok;
        if (rd.partial.length) {
            rd.partial.push(buf.subarray(pos, nl));
            const line = Buffer.concat(rd.partial);
            rd.partial = [];
            ok = readLine(rd, line, 0, line.length, onEvent);
        } else {
            // The common case: the line is read where it lies (no Buffer made for it).
            ok = readLine(rd, buf, pos, nl, onEvent);
        }
        pos = nl + 1;
        if (ok === false) {
            return;
        }
    }
}

// The end of the stream: an unterminated last line and event count as complete.
function readEnd(rd, onEvent) {
    if (rd.partial.length) {
        const line = Buffer.concat(rd.partial);
        rd.partial = [];
        if (readLine(rd, line, 0, line.length, onEvent) === false) {
            return;
        }
    }
    readLine(rd, line0, 0, 0, onEvent);
}

const line0 = Buffer.alloc(0);

const DATA = Buffer.from('data:');
const EVENT_FIELD = Buffer.from('event:');

function startsWith(buf, start, end, prefix) {
    if (end - start < prefix.length) {
        return false;
    }
    for (let i = 0; i < prefix.length; i++) {
        if (buf[start + i] !== prefix[i]) {
            return false;
        }
    }
    return true;
}

// The line buf[start, end) (its newline excluded).
function readLine(rd, buf, start, end, onEvent) {
    if (end > start && buf[end - 1] === 13) {
        end--;
    }
    if (end === start) {
        // A blank line ends the event.
        if (rd.data === null) {
            rd.name = '';
            rd.skip = false;
            return true;
        }
        const ev = {event: rd.name, data: rd.data};
        rd.name = '';
        rd.data = null;
        rd.skip = false;
        return onEvent(ev);
    }
    if (startsWith(buf, start, end, DATA)) {
        if (!rd.skip) {
            const from = start + (end - start > 5 && buf[start + 5] === 32 ? 6 : 5);
            const text = buf.toString('utf8', from, end);
            rd.data = rd.data === null ? text : rd.data + '\n' + text;
        }
    } else if (startsWith(buf, start, end, EVENT_FIELD)) {
        rd.name = buf.toString('utf8', start + 6, end).trim();
        rd.skip = rd.wanted !== null && !rd.wanted(rd.name);
    }
    return true;
}

function parseEvents(text) {
    const events = [];
    const rd = newReader(null);
    function take(ev) {
        events.push(ev);
        return true;
    }
    readBuffer(rd, Buffer.from(text), take);
    readEnd(rd, take);
    return events;
}

// Responses: only the final events (and errors, and unnamed ones) are decoded.
function responsesWanted(name) {
    return name === '' || name === 'error' || name === 'response.completed' || name === 'response.incomplete'
        || name === 'response.failed';
}

function foldEvent(st, ev) {
    st.events++;
    if (ev.data === '[DONE]') {
        st.complete = true;
        return;
    }
    let obj;
    try {
        obj = JSON.parse(ev.data);
    } catch (e) {
        st.error = {message: 'The upstream stream could not be read: ' + e.message, type: 'server_error',
                    param: null, code: 'bad_gateway'};
        return;
    }
    if (st.kind === 'chat') {
        foldChatChunk(st, obj);
    } else {
        foldResponsesEvent(st, obj);
    }
}

function tooLargeError(maxBytes) {
    return {message: 'The answer is larger than the gateway assembles (' + maxBytes + ' bytes); use stream: true.',
            type: 'server_error', param: null, code: 'response_too_large'};
}

// The answer at the end of the stream: the folded object, or an OpenAI error object.
function finish(st) {
    if (st.tooLarge) {
        return {error: tooLargeError(st.maxBytes)};
    }
    if (!st.error) {
        readEnd(st.sse, function (ev) {
            foldEvent(st, ev);
            return !st.error;
        });
    }
    if (st.error) {
        return {error: st.error};
    }
    const folded = st.kind === 'chat' ? chatAnswer(st) : responsesAnswer(st);
    return folded.error ? {error: folded.error} : folded.answer;
}

function streamError(obj) {
    if (obj.error) {
        return typeof obj.error === 'object' ? obj.error : {message: String(obj.error), type: 'server_error', param: null, code: 500};
    }
    if (obj.object === 'error') {
        return {message: obj.message, type: obj.type || 'server_error', param: obj.param || null, code: obj.code || 500};
    }
    return null;
}

// Chat: the chunks' deltas joined per choice, the last chunk's usage; vLLM's non-streaming
// ChatCompletionResponse fields (vllm/entrypoints/openai/protocol.py) in its order.
// Shared empty defaults (read only): a fresh `[]` or `{}` per event would stay allocated until the
// request ends.
const NONE = [];
const NO_DELTA = {};
const REASONING_KEYS = ['reasoning_content', 'reasoning'];

function foldChatChunk(st, chunk) {
    const err = streamError(chunk);
    if (err) {
        st.error = err;
        return;
    }
    if (!st.head) {
        st.head = {id: chunk.id, created: chunk.created, model: chunk.model,
                   system_fingerprint: chunk.system_fingerprint,
                   promptTokenIds: chunk.prompt_token_ids === undefined ? null : chunk.prompt_token_ids};
    }
    if (chunk.usage) {
        st.usage = chunk.usage;
    }
    // vLLM 0.32 names its build in the usage chunk only, 0.11 in none: the last one sent.
    if (chunk.system_fingerprint) {
        st.head.system_fingerprint = chunk.system_fingerprint;
    }
    const list = chunk.choices || NONE;
    for (let j = 0; j < list.length; j++) {
        const c = list[j];
        let ch = st.choices[c.index];
        if (!ch) {
            ch = st.choices[c.index] = {index: c.index, role: 'assistant', content: null, reasoning: null,
                                        reasoningKey: null, tools: [], finish: null, stopReason: null,
                                        logprobs: null, tokenIds: null};
        }
        const d = c.delta || NO_DELTA;
        if (d.role) {
            ch.role = d.role;
        }
        // Deltas are kept as pieces and joined once at the end: njs's legacy engine frees no
        // string before the request ends, so `text += delta` kept every prefix (2 MB of content
        // in 1 KiB deltas grew nginx by 2 GiB, measured; tests/gateway/test_gateway_memory.py).
        if (typeof d.content === 'string') {
            (ch.content = ch.content || []).push(d.content);
        }
        // The reasoning text under the name the engine streams it: vLLM 0.11 `reasoning_content`,
        // later lines `reasoning` (their non-streaming message has only that one).
        for (let k = 0; k < REASONING_KEYS.length; k++) {
            const key = REASONING_KEYS[k];
            if (typeof d[key] === 'string') {
                ch.reasoningKey = key;
                (ch.reasoning = ch.reasoning || []).push(d[key]);
            }
        }
        const calls = d.tool_calls || NONE;
        for (let k = 0; k < calls.length; k++) {
            const tc = calls[k];
            const at = typeof tc.index === 'number' ? tc.index : k;
            let call = ch.tools[at];
            if (!call) {
                call = ch.tools[at] = {id: null, type: 'function', function: {name: [], arguments: []}};
            }
            if (tc.id) {
                call.id = tc.id;
            }
            if (tc.type) {
                call.type = tc.type;
            }
            if (tc.function) {
                if (tc.function.name) {
                    call.function.name.push(tc.function.name);
                }
                if (tc.function.arguments) {
                    call.function.arguments.push(tc.function.arguments);
                }
            }
        }
        if (c.logprobs && Array.isArray(c.logprobs.content)) {
            ch.logprobs = ch.logprobs || {content: []};
            for (let k = 0; k < c.logprobs.content.length; k++) {
                ch.logprobs.content.push(c.logprobs.content[k]);
            }
        }
        // vLLM streams each chunk's token ids when asked (return_token_ids); joined, they are the
        // non-streaming answer's list.
        if (Array.isArray(c.token_ids)) {
            ch.tokenIds = (ch.tokenIds || []).concat(c.token_ids);
        }
        if (c.finish_reason) {
            ch.finish = c.finish_reason;
        }
        if (c.stop_reason !== undefined && c.stop_reason !== null) {
            ch.stopReason = c.stop_reason;
        }
    }
}

function joined(parts) {
    return parts ? parts.join('') : null;
}

function chatAnswer(st) {
    if (!st.head) {
        return {error: {message: 'The upstream stream ended without an answer.', type: 'server_error', param: null,
                        code: 'bad_gateway'}};
    }
    const out = [];
    const indexes = Object.keys(st.choices).map(Number).sort(function (a, b) { return a - b; });
    for (let i = 0; i < indexes.length; i++) {
        const ch = st.choices[indexes[i]];
        const tools = ch.tools.filter(Boolean).map(function (call) {
            return {id: call.id, type: call.type,
                    function: {name: call.function.name.join(''), arguments: call.function.arguments.join('')}};
        });
        const message = {role: ch.role, content: joined(ch.content), refusal: null, annotations: null, audio: null,
                         function_call: null};
        // As OpenAI and vLLM after 0.11 answer: no `tool_calls` field without a tool call (0.11
        // sends an empty list).
        if (tools.length) {
            message.tool_calls = tools;
        }
        // No reasoning streamed: the engine's own null field is left out rather than guessed, as
        // its name depends on the engine's line.
        if (ch.reasoningKey) {
            message[ch.reasoningKey] = joined(ch.reasoning);
        }
        out.push({
            index: ch.index,
            message: message,
            logprobs: ch.logprobs,
            finish_reason: ch.finish,
            stop_reason: ch.stopReason,
            token_ids: ch.tokenIds,
        });
    }
    const head = st.head;
    return {answer: {
        id: head.id, object: 'chat.completion', created: head.created, model: head.model, choices: out,
        service_tier: null, system_fingerprint: head.system_fingerprint || null, usage: st.usage,
        prompt_logprobs: null, prompt_token_ids: head.promptTokenIds, kv_transfer_params: null,
    }};
}

// Responses: the final event (response.completed, .incomplete or .failed) carries the whole
// Response object, which is exactly the non-streaming answer; only that one is kept.
function foldResponsesEvent(st, ev) {
    if (ev.type === 'error') {
        st.error = {message: ev.message || 'error', type: 'server_error', param: ev.param || null, code: ev.code || 500};
        return;
    }
    const err = ev.type ? null : streamError(ev);
    if (err) {
        st.error = err;
        return;
    }
    if ((ev.type === 'response.completed' || ev.type === 'response.incomplete' || ev.type === 'response.failed')
        && ev.response) {
        st.last = ev.response;
        st.complete = true;
    }
}

function responsesAnswer(st) {
    if (!st.last) {
        return {error: {message: 'The upstream stream ended without a completed response.', type: 'server_error',
                        param: null, code: 'bad_gateway'}};
    }
    return {answer: st.last};
}

// Folds a whole event stream text at once (what the filters do buffer by buffer).
function foldText(kind, text, maxBytes) {
    const st = newFold(kind, maxBytes || Infinity, 0);
    feed(st, Buffer.from(text));
    return finish(st);
}

export default {newFold, feed, finish, tooLargeError, foldText, parseEvents, streamError};
