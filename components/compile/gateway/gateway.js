// The llm-serving gateway: OpenAI's HTTP API to clients, Stargate's gateway contract to the
// router. Rendered into the gateway's ConfigMap beside nginx.conf and gateway_config.js (the
// settings, generated from the stack config). Written for njs 0.7.9 (Debian bookworm) and later:
// no destructuring, no optional chaining, no js_shared_dict_zone.
//
// Request flow (nginx.conf):
//   js_set $gw_tenant    tenant()     bearer key -> sha256 -> tenant (the keys Secret, re-read)
//   js_content           chat() / responses() / embeddings() / models()
//     streaming and embeddings: headers into js_var variables, then an internal redirect to
//       @gw_stream, which proxies the (unchanged) body unbuffered;
//     non-streaming chat / Responses: the body is re-sent with stream=true (chat: with
//       stream_options.include_usage) through @gw_fold, whose header and body filters fold the
//       event stream into one JSON answer shaped like vLLM's non-streaming answer. (A proxied
//       main request, not a subrequest: nginx notices a client that goes away only there.)

import crypto from 'crypto';
import fs from 'fs';
import cfg from 'gateway_config.js';

const SUPPORTED = 'POST /v1/chat/completions, POST /v1/responses, POST /v1/embeddings and GET /v1/models';

function sha256(text) {
    return crypto.createHash('sha256').update(text).digest('hex');
}

function send(r, status, obj, extra) {
    r.headersOut['Content-Type'] = 'application/json';
    if (extra) {
        for (const name in extra) {
            r.headersOut[name] = extra[name];
        }
    }
    r.return(status, JSON.stringify(obj) + '\n');
}

function fail(r, status, message, type, code, param, extra) {
    send(r, status, {error: {message: message, type: type, param: param || null, code: code || null}}, extra);
}

function unavailable(r, message) {
    fail(r, 503, message, 'service_unavailable', 'service_unavailable', null,
         {'Retry-After': String(cfg.retryAfterSeconds)});
}

// ---- tenants ------------------------------------------------------------------------------

function bearer(r) {
    const auth = r.headersIn['Authorization'] || '';
    const m = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    return m ? m[1] : '';
}

// js_set $gw_tenant: the tenant of the request's API key, or '' (no keys configured, no key, or
// an unknown key). Hashes only: the Secret holds `<sha256 hex> <tenant>` lines.
function tenant(r) {
    if (!cfg.apiKeys) {
        return '';
    }
    const key = bearer(r);
    if (!key) {
        return '';
    }
    const digest = sha256(key);
    let text;
    try {
        text = fs.readFileSync(cfg.apiKeys.file, 'utf8');
    } catch (e) {
        r.error('gateway: cannot read the API key file ' + cfg.apiKeys.file + ': ' + e.message);
        return '';
    }
    const lines = text.split('\n');
    for (let i = 0; i < lines.length; i++) {
        const parts = lines[i].trim().split(/\s+/);
        if (parts.length >= 2 && parts[0].toLowerCase() === digest && tenantConfig(parts[1])) {
            return parts[1];
        }
    }
    return '';
}

// A configured tenant's settings, or null. Own properties only: a key line naming `constructor`,
// `__proto__` or `toString` must not find Object.prototype's members through cfg.tenants.
function tenantConfig(name) {
    return name && Object.prototype.hasOwnProperty.call(cfg.tenants, name) ? cfg.tenants[name] : null;
}

// auth_request's subrequest (/_gw/auth): 204 for a known key, 401 otherwise. It runs in the
// access phase with the headers only, so nginx answers an unknown key before reading the body.
function authorize(r) {
    r.return(tenant(r) ? 204 : 401);
}

// The body as text. nginx writes every body to a named temp file (client_body_in_file_only
// clean; a small memory buffer, so slow uploads do not hold memory; an unnamed temp file is
// unlinked at once and njs cannot read it), removed when the request ends. It is read only once
// whole and after the key was checked.
function requestText(r) {
    const file = r.variables.request_body_file;
    return file ? fs.readFileSync(file, 'utf8') : r.requestText;
}

function allowedModels(tenantName) {
    const t = tenantConfig(tenantName);
    if (t && t.models) {
        return t.models;
    }
    return cfg.models;
}

// ---- request checks -----------------------------------------------------------------------

// Returns {body, text, model, tenant} or null after answering with an OpenAI error.
function admit(r) {
    if (r.method !== 'POST') {
        fail(r, 405, r.method + ' is not allowed on ' + r.uri + '; use POST', 'invalid_request_error',
             'method_not_allowed', null, {'Allow': 'POST'});
        return null;
    }
    const who = cfg.apiKeys ? r.variables.gw_tenant : '';
    if (cfg.apiKeys && !who) {
        const message = bearer(r) ? 'Incorrect API key provided.'
            : 'You did not provide an API key: send it as `Authorization: Bearer <key>`.';
        fail(r, 401, message, 'invalid_request_error', 'invalid_api_key', null,
             {'WWW-Authenticate': 'Bearer'});
        return null;
    }
    const text = requestText(r);
    if (text === undefined || text === null || text === '') {
        fail(r, 400, 'The request body is empty; send a JSON object.', 'invalid_request_error', 'invalid_json');
        return null;
    }
    let body;
    try {
        body = JSON.parse(text);
    } catch (e) {
        fail(r, 400, 'We could not parse the JSON body of your request: ' + e.message,
             'invalid_request_error', 'invalid_json');
        return null;
    }
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
        fail(r, 400, 'The request body must be a JSON object.', 'invalid_request_error', 'invalid_json');
        return null;
    }
    if (typeof body.model !== 'string' || body.model === '') {
        fail(r, 400, 'You must provide a model parameter.', 'invalid_request_error', 'missing_model', 'model');
        return null;
    }
    if (allowedModels(who).indexOf(body.model) < 0) {
        fail(r, 404, 'The model `' + body.model + '` does not exist or you do not have access to it.',
             'invalid_request_error', 'model_not_found', 'model');
        return null;
    }
    if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean') {
        fail(r, 400, '`stream` must be true or false.', 'invalid_request_error', 'invalid_value', 'stream');
        return null;
    }
    return {body: body, text: text, model: body.model, tenant: who};
}

// ---- the contract headers -----------------------------------------------------------------

// x-input-tokens: an estimate, ceil(characters of text / 4) plus 4 per chat message or input item
// (the role and framing tokens of a chat template); token-id arrays count one per id.
function textChars(value) {
    if (typeof value === 'string') {
        return value.length;
    }
    if (typeof value === 'number') {
        return 0;
    }
    if (Array.isArray(value)) {
        let n = 0;
        for (let i = 0; i < value.length; i++) {
            n += textChars(value[i]);
        }
        return n;
    }
    if (value && typeof value === 'object') {
        let n = 0;
        for (const k in value) {
            if (k === 'text' || k === 'content' || k === 'arguments' || k === 'input' || k === 'output'
                || k === 'instructions' || k === 'name' || k === 'function' || k === 'tool_calls'
                || k === 'refusal' || k === 'summary') {
                n += textChars(value[k]);
            }
        }
        return n;
    }
    return 0;
}

function tokenIds(value) {
    // Embeddings input given as token ids: [1, 2, 3] or [[1, 2], [3]].
    if (!Array.isArray(value) || value.length === 0) {
        return -1;
    }
    let n = 0;
    for (let i = 0; i < value.length; i++) {
        if (typeof value[i] === 'number') {
            n += 1;
        } else if (Array.isArray(value[i]) && value[i].every(function (x) { return typeof x === 'number'; })) {
            n += value[i].length;
        } else {
            return -1;
        }
    }
    return n;
}

function inputTokens(kind, body) {
    if (kind === 'chat') {
        const messages = Array.isArray(body.messages) ? body.messages : [];
        return Math.ceil(textChars(messages) / 4) + 4 * messages.length;
    }
    if (kind === 'responses') {
        const items = Array.isArray(body.input) ? body.input.length : 1;
        return Math.ceil((textChars(body.input) + textChars(body.instructions || '')) / 4) + 4 * items;
    }
    const ids = tokenIds(body.input);
    return ids >= 0 ? ids : Math.ceil(textChars(body.input) / 4);
}

// x-cache-affinity-key: the platform-allowed session header's value when present, else the
// conversation's leading messages (system/developer ones up to and including the first user
// message), hashed with the tenant and model: every turn of one chat repeats that prefix, so it
// keeps one key and lands where its prefix is cached.
function leading(list) {
    const out = [];
    for (let i = 0; i < list.length && out.length < cfg.affinity.maxLeadingMessages; i++) {
        out.push(list[i]);
        if (list[i] && list[i].role === 'user') {
            break;
        }
    }
    return out;
}

function affinityKey(r, kind, body, who) {
    if (!cfg.affinity) {
        return '';
    }
    if (cfg.affinity.sessionHeader) {
        const session = r.headersIn[cfg.affinity.sessionHeader];
        if (session) {
            return sha256(JSON.stringify(['session', who, body.model, session])).slice(0, 32);
        }
    }
    let prefix;
    if (kind === 'embeddings') {
        // No conversation: the input keys it (a load balancer may require a key for every request).
        prefix = [Array.isArray(body.input) ? body.input[0] : body.input];
    } else if (kind === 'chat') {
        prefix = leading(Array.isArray(body.messages) ? body.messages : []);
    } else {
        const input = typeof body.input === 'string' ? [{role: 'user', content: body.input}]
            : (Array.isArray(body.input) ? body.input : []);
        prefix = [body.instructions || null].concat(leading(input));
    }
    return sha256(JSON.stringify(['prefix', who, body.model, prefix])).slice(0, 32);
}

// x-stargate-max-wait-ms: the request's remaining deadline, the gateway's own or the client's
// shorter one (the OpenAI SDKs send their read timeout in seconds as x-stainless-read-timeout).
function maxWaitMs(r) {
    let ms = cfg.timeoutMs;
    const client = parseFloat(r.headersIn['X-Stainless-Read-Timeout'] || r.headersIn['X-Stainless-Timeout'] || '');
    if (client > 0 && client * 1000 < ms) {
        ms = Math.floor(client * 1000);
    }
    return Math.max(ms, 1);
}

function setHeaders(r, kind, admitted, body) {
    const t = tenantConfig(admitted.tenant);
    r.variables.gw_model = admitted.model;
    r.variables.gw_input_tokens = String(inputTokens(kind, admitted.body));
    r.variables.gw_max_wait = String(maxWaitMs(r));
    r.variables.gw_routing_key = t && t.routingKey ? t.routingKey : '';
    r.variables.gw_affinity = affinityKey(r, kind, admitted.body, admitted.tenant);
    r.variables.gw_body = body;
}

// ---- endpoints ----------------------------------------------------------------------------

function handle(r, kind) {
    const admitted = admit(r);
    if (!admitted) {
        return;
    }
    if (kind === 'embeddings' || admitted.body.stream === true) {
        // Unchanged body; the router and pylon see exactly what the client sent.
        setHeaders(r, kind, admitted, admitted.text);
        r.internalRedirect('@gw_stream');
        return;
    }
    const body = admitted.body;
    body.stream = true;
    if (kind === 'chat') {
        const options = body.stream_options && typeof body.stream_options === 'object' ? body.stream_options : {};
        options.include_usage = true;
        body.stream_options = options;
    }
    setHeaders(r, kind, admitted, JSON.stringify(body));
    r.variables.gw_kind = kind;
    r.internalRedirect('@gw_fold');
}

// The non-streaming answer, folded from the event stream by two filters on @gw_fold. The
// upstream status is known when its headers arrive: anything but 200 passes through unchanged
// (router errors are intercepted by nginx before these filters run); a 200 stream is held
// (bounded by maxResponseBytes) and replaced by one JSON object at its end. An error event in
// the middle of a stream arrives after the 200 went out: the body is then the OpenAI error object.
let held = [];
let heldBytes = 0;

function foldHeaders(r) {
    if (r.status !== 200) {
        r.variables.gw_fold = '';
        return;
    }
    r.variables.gw_fold = r.variables.gw_kind;
    r.headersOut['Content-Type'] = 'application/json';
    delete r.headersOut['Content-Length'];
}

function foldBody(r, data, flags) {
    const kind = r.variables.gw_fold;
    if (!kind) {
        r.sendBuffer(data, flags);
        return;
    }
    if (heldBytes <= cfg.maxResponseBytes) {
        held.push(data);
        heldBytes += data.length;
    }
    if (!flags.last) {
        return;
    }
    let out;
    if (heldBytes > cfg.maxResponseBytes) {
        out = {error: {message: 'The answer is larger than the gateway assembles (' + cfg.maxResponseBytes
            + ' bytes); use stream: true.', type: 'server_error', param: null, code: 'response_too_large'}};
    } else {
        try {
            const events = parseEvents(Buffer.concat(held).toString());
            const folded = kind === 'chat' ? foldChat(events) : foldResponses(events);
            out = folded.error ? {error: folded.error} : folded.answer;
        } catch (e) {
            out = {error: {message: 'The upstream stream could not be read: ' + e.message, type: 'server_error',
                           param: null, code: 'bad_gateway'}};
        }
    }
    held = [];
    r.sendBuffer(JSON.stringify(out) + '\n', flags);
}

function parseEvents(text) {
    const events = [];
    const blocks = text.split(/\r?\n\r?\n/);
    for (let i = 0; i < blocks.length; i++) {
        const lines = blocks[i].split(/\r?\n/);
        let name = '';
        const data = [];
        for (let j = 0; j < lines.length; j++) {
            const line = lines[j];
            if (line.indexOf('data:') === 0) {
                data.push(line.slice(5).replace(/^ /, ''));
            } else if (line.indexOf('event:') === 0) {
                name = line.slice(6).trim();
            }
        }
        if (data.length) {
            events.push({event: name, data: data.join('\n')});
        }
    }
    return events;
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
function foldChat(events) {
    let head = null;
    let usage = null;
    const choices = {};
    for (let i = 0; i < events.length; i++) {
        if (events[i].data === '[DONE]') {
            continue;
        }
        const chunk = JSON.parse(events[i].data);
        const err = streamError(chunk);
        if (err) {
            return {error: err};
        }
        if (!head) {
            head = chunk;
        }
        if (chunk.usage) {
            usage = chunk.usage;
        }
        const list = chunk.choices || [];
        for (let j = 0; j < list.length; j++) {
            const c = list[j];
            let st = choices[c.index];
            if (!st) {
                st = choices[c.index] = {index: c.index, role: 'assistant', content: null, reasoning: null,
                                         tools: [], finish: null, stopReason: null, logprobs: null};
            }
            const d = c.delta || {};
            if (d.role) {
                st.role = d.role;
            }
            if (typeof d.content === 'string') {
                st.content = (st.content || '') + d.content;
            }
            if (typeof d.reasoning_content === 'string') {
                st.reasoning = (st.reasoning || '') + d.reasoning_content;
            }
            const calls = d.tool_calls || [];
            for (let k = 0; k < calls.length; k++) {
                const tc = calls[k];
                const at = typeof tc.index === 'number' ? tc.index : k;
                let call = st.tools[at];
                if (!call) {
                    call = st.tools[at] = {id: null, type: 'function', function: {name: '', arguments: ''}};
                }
                if (tc.id) {
                    call.id = tc.id;
                }
                if (tc.type) {
                    call.type = tc.type;
                }
                if (tc.function) {
                    if (tc.function.name) {
                        call.function.name += tc.function.name;
                    }
                    if (tc.function.arguments) {
                        call.function.arguments += tc.function.arguments;
                    }
                }
            }
            if (c.logprobs && Array.isArray(c.logprobs.content)) {
                st.logprobs = st.logprobs || {content: []};
                st.logprobs.content = st.logprobs.content.concat(c.logprobs.content);
            }
            if (c.finish_reason) {
                st.finish = c.finish_reason;
            }
            if (c.stop_reason !== undefined && c.stop_reason !== null) {
                st.stopReason = c.stop_reason;
            }
        }
    }
    if (!head) {
        return {error: {message: 'The upstream stream ended without an answer.', type: 'server_error', param: null, code: 502}};
    }
    const out = [];
    const indexes = Object.keys(choices).map(Number).sort(function (a, b) { return a - b; });
    for (let i = 0; i < indexes.length; i++) {
        const st = choices[indexes[i]];
        out.push({
            index: st.index,
            message: {role: st.role, content: st.content, refusal: null, annotations: null, audio: null,
                      function_call: null, tool_calls: st.tools.filter(Boolean), reasoning_content: st.reasoning},
            logprobs: st.logprobs,
            finish_reason: st.finish,
            stop_reason: st.stopReason,
        });
    }
    return {answer: {
        id: head.id, object: 'chat.completion', created: head.created, model: head.model, choices: out,
        service_tier: null, system_fingerprint: head.system_fingerprint || null, usage: usage,
        prompt_logprobs: null, kv_transfer_params: null,
    }};
}

// Responses: the final event (response.completed, .incomplete or .failed) carries the whole
// Response object, which is exactly the non-streaming answer.
function foldResponses(events) {
    let last = null;
    for (let i = 0; i < events.length; i++) {
        if (events[i].data === '[DONE]') {
            continue;
        }
        const ev = JSON.parse(events[i].data);
        if (ev.type === 'error') {
            return {error: {message: ev.message || 'error', type: 'server_error', param: ev.param || null, code: ev.code || 500}};
        }
        const err = ev.type ? null : streamError(ev);
        if (err) {
            return {error: err};
        }
        if ((ev.type === 'response.completed' || ev.type === 'response.incomplete' || ev.type === 'response.failed')
            && ev.response) {
            last = ev.response;
        }
    }
    if (!last) {
        return {error: {message: 'The upstream stream ended without a completed response.', type: 'server_error', param: null, code: 502}};
    }
    return {answer: last};
}

function chat(r) {
    handle(r, 'chat');
}

function responses(r) {
    handle(r, 'responses');
}

function embeddings(r) {
    handle(r, 'embeddings');
}

// GET /v1/models: the router's {"model_ids": [...]} (the models routable on the router pod that
// answers) as OpenAI's list, narrowed to what the caller may use.
async function models(r) {
    if (r.method !== 'GET') {
        fail(r, 405, r.method + ' is not allowed on /v1/models; use GET', 'invalid_request_error',
             'method_not_allowed', null, {'Allow': 'GET'});
        return;
    }
    const who = cfg.apiKeys ? r.variables.gw_tenant : '';
    if (cfg.apiKeys && !who) {
        fail(r, 401, bearer(r) ? 'Incorrect API key provided.' : 'You did not provide an API key.',
             'invalid_request_error', 'invalid_api_key', null, {'WWW-Authenticate': 'Bearer'});
        return;
    }
    let reply;
    try {
        reply = await r.subrequest('/_gw/models', {method: 'GET'});
    } catch (e) {
        unavailable(r, 'The router is not reachable; retry later.');
        return;
    }
    if (reply.status !== 200) {
        unavailable(r, 'The router is not reachable; retry later.');
        return;
    }
    let ids = [];
    try {
        ids = JSON.parse(reply.responseText).model_ids || [];
    } catch (e) {
        unavailable(r, 'The router answered the model list with something else than JSON; retry later.');
        return;
    }
    const allowed = allowedModels(who);
    const created = Math.floor(Date.now() / 1000);
    const data = ids.filter(function (id) { return allowed.indexOf(id) >= 0; }).map(function (id) {
        return {id: id, object: 'model', created: created, owned_by: 'llm-serving'};
    });
    send(r, 200, {object: 'list', data: data});
}

function unsupported(r) {
    const completions = r.uri === '/v1/completions';
    const message = (completions
        ? 'The legacy /v1/completions endpoint is not served here (the router cannot route it); use /v1/chat/completions.'
        : 'Unknown endpoint ' + r.method + ' ' + r.uri + '.') + ' Supported: ' + SUPPORTED + '.';
    fail(r, 404, message, 'invalid_request_error', 'unsupported_endpoint');
}

export default {tenant, authorize, chat, responses, embeddings, models, unsupported, foldHeaders, foldBody};
