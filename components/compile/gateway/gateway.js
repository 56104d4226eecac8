// The llm-serving gateway: OpenAI's HTTP API to clients, Stargate's gateway contract to the
// router. Rendered into the gateway's ConfigMap beside nginx.conf and gateway_config.js (the
// settings, generated from the stack config). Written for njs 0.8 (Debian trixie's 0.8.9, the
// image's): the token-limit path uses js_shared_dict_zone, js_periodic and ngx.fetch.
//
// Request flow (nginx.conf):
//   js_set $gw_admit     admitRequest()  the replica's in-flight budgets (admission.js), before the key check
//   js_set $gw_tenant    tenant()     bearer key -> sha256 -> tenant (the keys Secret, re-read)
//   js_content           chat() / responses() / embeddings() / models()
//     the body is read for what routing needs (body.js), never parsed into values;
//     streaming and embeddings: headers into js_var variables, then an internal redirect to
//       @gw_stream, which proxies the client's body (nginx's temp file) unbuffered, its usage
//       read by countStream (usage.js);
//     non-streaming chat / Responses: the body is re-sent with stream=true (chat: with
//       stream_options.include_usage) through @gw_fold to the loopback fold server, whose
//       filters fold the event stream into one JSON answer shaped like vLLM's (fold.js). (A
//       proxied main request, not a subrequest: nginx notices a client that goes away only there.)
//   js_set $gw_observe   observe()    the log phase: metrics, charges, budgets given back
//
// Modules (ES modules on js_path, each with its node tests in tests/gateway/js): body.js (the
// request body), usage.js (a stream's usage), fold.js (the non-streaming answer), admission.js
// (the in-flight budgets), pools.js (the holds' fair share), metrics.js (the counters), tenants.js
// (keys and tenants), split.js (a next revision's share), charges.js (token usage); the statuses
// come from statuses.py through gateway_config.js (refuse).

import fs from 'fs';
import body from 'body.js';
import fold from 'fold.js';
import admission from 'admission.js';
import pools from 'pools.js';
import counters from 'metrics.js';
import tenants from 'tenants.js';
import shares from 'split.js';
import charges from 'charges.js';
import cfg from 'gateway_config.js';

const SUPPORTED = 'POST /v1/chat/completions, POST /v1/responses, POST /v1/embeddings and GET /v1/models';


function send(r, status, obj, extra) {
    r.headersOut['Content-Type'] = 'application/json';
    if (extra) {
        for (const name in extra) {
            r.headersOut[name] = extra[name];
        }
    }
    r.return(status, JSON.stringify(obj) + '\n');
}

// One of the gateway's own error answers, by its OpenAI `code`: its status and type are
// statuses.py's (cfg.answers), the one place that decides every status a caller can get.
function refuse(r, code, message, param, extra) {
    const answer = cfg.answers[code];
    send(r, answer.status, {error: {message: message, type: answer.type, param: param || null, code: code}}, extra);
}

function unavailable(r, message) {
    refuse(r, 'service_unavailable', message, null, {'Retry-After': String(cfg.retryAfterSeconds)});
}

// ---- tenants ------------------------------------------------------------------------------




// auth_request's subrequest (/_gw/auth): 204 for a known key, 401 otherwise. It runs in the
// access phase with the headers only, so nginx answers an unknown key before reading the body.
function authorize(r) {
    r.return(tenants.tenant(r) ? 204 : 401);
}

// The body, read once it is whole and after the key was checked, for what routing needs
// (body.js: one pass over its bytes through one buffer, nothing per value). nginx writes every
// body to a named temp file (client_body_in_file_only clean; a small memory buffer, so slow
// uploads do not hold memory; an unnamed temp file is unlinked at once and njs cannot read it),
// removed when the request ends; streams and embeddings are sent on from that file by nginx.
//
// Read in slices: after each read that took the worker longer than SCAN_SLICE_MS (a large body
// made of small values inside the message content is read value by value, about 1.2 µs a byte on
// njs), the handler yields, so the worker's other requests (another tenant's streams) are served
// between the slices rather than after the whole body.
const SCAN_SLICE_MS = 20;

async function scanRequest(r, kind) {
    const leading = (cfg.affinity || cfg.splitKey || {maxLeadingMessages: 4}).maxLeadingMessages;
    const file = r.variables.request_body_file;
    if (!file) {
        const bytes = r.requestBuffer || Buffer.alloc(0);
        return body.scanBody(body.bufferReader(bytes), kind, leading, bytes.length);
    }
    const scan = body.startScan(kind, leading, Number(r.variables.content_length) || 0);
    const fd = fs.openSync(file, 'r');
    let at = 0;
    let n;
    let since = Date.now();
    try {
        for (;;) {
            n = fs.readSync(fd, scan.buf, 0, scan.buf.length, at);
            at += n;
            if (!n || !body.scanChunk(scan, n)) {
                break;
            }
            if (Date.now() - since > SCAN_SLICE_MS) {
                // 1 ms, not 0: njs posts a 0 ms timer's event, which nginx runs before it looks
                // at its connections again.
                await sleep(1);
                since = Date.now();
            }
        }
    } finally {
        fs.closeSync(fd);
    }
    return body.endScan(scan);
}

// The whole body's bytes (the fold's, which rewrites the stream members).
function requestBytes(r) {
    const file = r.variables.request_body_file;
    return file ? fs.readFileSync(file) : (r.requestBuffer || Buffer.alloc(0));
}


// How long a full fold share is looked at again before a 429 (handle).
const FOLD_WAIT_MS = 200;
const FOLD_WAIT_STEP_MS = 10;

// js_set $gw_admit (admission.js).
function admitRequest(r) {
    return admission.admitRequest(r);
}

// The answer when a budget is full: the tenant's share (429: its own requests must end first)
// or, without keys, the replica's (503: another replica may have room).
function inFlightFull(r, what) {
    const names = {requests: 'requests open', bodyBytes: 'bytes of request bodies open', folds: 'non-streaming answers being assembled'};
    if (cfg.apiKeys) {
        refuse(r, 'too_many_requests_in_flight', 'Too many ' + names[what] + ' for your API key on this gateway '
               + 'replica at once (its share); retry when some have ended.', null, {'Retry-After': '1'});
    } else {
        unavailable(r, 'The gateway replica has too many ' + names[what] + ' at once; retry later.');
    }
}

// ---- request checks -----------------------------------------------------------------------

// Returns {scan, model, stream, tenant} or null after answering with an OpenAI error.
async function admit(r, kind) {
    if (r.method !== 'POST') {
        refuse(r, 'method_not_allowed', r.method + ' is not allowed on ' + r.uri + '; use POST', null, {'Allow': 'POST'});
        return null;
    }
    const who = cfg.apiKeys ? r.variables.gw_tenant : '';
    if (cfg.apiKeys && !who) {
        const message = tenants.bearer(r) ? 'Incorrect API key provided.'
            : 'You did not provide an API key: send it as `Authorization: Bearer <key>`.';
        refuse(r, 'invalid_api_key', message, null, {'WWW-Authenticate': 'Bearer'});
        return null;
    }
    const scan = await scanRequest(r, kind);
    if (scan.error) {
        const message = scan.error === 'it is empty' ? 'The request body is empty; send a JSON object.'
            : (scan.error === 'it is not a JSON object' ? 'The request body must be a JSON object.'
               : 'We could not parse the JSON body of your request: ' + scan.error + '.');
        refuse(r, 'invalid_json', message);
        return null;
    }
    if (scan.modelTooLong) {
        refuse(r, 'model_not_found', 'The model does not exist or you do not have access to it.', 'model');
        return null;
    }
    if (typeof scan.model !== 'string' || scan.model === '') {
        refuse(r, 'missing_model', 'You must provide a model parameter.', 'model');
        return null;
    }
    if (tenants.allowedModels(who).indexOf(scan.model) < 0) {
        refuse(r, 'model_not_found', 'The model `' + scan.model + '` does not exist or you do not have access to it.',
               'model');
        return null;
    }
    if (scan.stream === 'invalid') {
        refuse(r, 'invalid_value', '`stream` must be true or false.', 'stream');
        return null;
    }
    return {scan: scan, model: scan.model, stream: scan.stream === true, tenant: who};
}

// ---- the contract headers -----------------------------------------------------------------

// x-input-tokens: an estimate, ceil(UTF-8 bytes of text / 4) plus 4 per chat message or input
// item (the role and framing tokens of a chat template); token-id arrays count one per id
// (body.js, which reads it from the body).

// x-cache-affinity-key: the platform-allowed session header's value when present, else the
// conversation's leading messages (system/developer ones up to and including the first user
// message, their bytes as the client sent them: body.js hashes them as it reads), hashed with
// the tenant and model: every turn of one chat repeats that prefix, so it keeps one key and lands
// where its prefix is cached. `settings`: maxLeadingMessages, sessionHeader
// (router.gateway.affinity's; cfg.splitKey when affinity is off).
function conversationKey(r, admitted, settings) {
    if (settings.sessionHeader) {
        const session = r.headersIn[settings.sessionHeader];
        if (session) {
            return tenants.sha256(JSON.stringify(['session', admitted.tenant, admitted.model, session])).slice(0, 32);
        }
    }
    return tenants.sha256(JSON.stringify(['prefix', admitted.tenant, admitted.model, admitted.scan.prefix])).slice(0, 32);
}

function affinityKey(r, admitted) {
    return cfg.affinity ? conversationKey(r, admitted, cfg.affinity) : '';
}

// ---- a next revision's share (models[].next) ----------------------------------------------
//
// cfg.splits: model -> {revision: the next revision's router id, percent}. A conversation goes
// to the next revision when its bucket (0-99, a hash of the conversation key affinity uses) is
// below `percent`. Every turn of a conversation has the same key, so it stays on the revision it
// started on; raising the percent only moves conversations onto the next revision (a bucket below
// the old percent is below the new one), lowering it only moves them back. A next revision the
// router has no server for sends its share to the serving one (hold, foldAnswer): it gets traffic
// only once its pods serve, which is after its weights were pulled and verified.





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

function setHeaders(r, admitted) {
    const t = tenants.tenantConfig(admitted.tenant);
    const affinity = affinityKey(r, admitted);
    const split = cfg.splits && cfg.splits[admitted.model];
    // x-model: the router id of the revision that serves this conversation (the model's own, or
    // its next revision's for the share that goes there).
    r.variables.gw_model = split
        ? shares.routedModel(admitted.model, affinity || conversationKey(r, admitted, cfg.splitKey))
        : admitted.model;
    r.variables.gw_input_tokens = String(admitted.scan.inputTokens);
    r.variables.gw_max_wait = String(maxWaitMs(r));
    r.variables.gw_routing_key = t && t.routingKey ? t.routingKey : '';
    r.variables.gw_affinity = affinity;
}

// ---- requests held while their model has no server (router.gateway.hold) -----------------
//
// The router answers `404 no_eligible_candidates` at once when no server is registered for a
// model (asleep at zero replicas, or every pod restarting). Such a request is held here, counted
// in gw_held (per model: the demand a scaler wakes the model on; and in all: the bounds), while
// the router is asked every pollMs whether it lists the model, which it does once a server is
// routable (its /v1/models lists active targets only). Then it is sent again, with what is left
// of its deadline. Past the hold's timeout or the request's deadline, or beyond the bounds: 503
// with Retry-After. Nothing was sent to the client before, so a streaming client's first byte is
// the woken server's. Unscoped tenants only: the router's list shows unscoped servers.

function sleep(ms) {
    return new Promise(function (resolve) { setTimeout(resolve, ms); });
}

// The router's routable models (its /v1/models, `model_ids`); throws an Error whose message is
// the client's 503 text when the router is not reachable or answers something else.
async function routerModelIds(r) {
    let reply;
    try {
        reply = await r.subrequest('/_gw/models', {method: 'GET'});
    } catch (e) {
        throw new Error('The router is not reachable; retry later.');
    }
    if (reply.status !== 200) {
        throw new Error('The router is not reachable; retry later.');
    }
    try {
        return JSON.parse(reply.responseText).model_ids || [];
    } catch (e) {
        throw new Error('The router answered the model list with something else than JSON; retry later.');
    }
}

async function listed(r, model) {
    try {
        return (await routerModelIds(r)).indexOf(model) >= 0;
    } catch (e) {
        return false;
    }
}



// Holds until the router lists `model`, `deadline` (ms since the epoch) passes, or `gone()` says
// the client left (looked at every 50 ms: a client that left leaves the pool at once): 'released',
// 'timeout', 'full' (over a bound: not held), 'gone' or 'preempted' (gave way to another tenant).
async function holdFor(r, model, who, deadline, gone) {
    const held = ngx.shared.gw_held;
    const list = pools.holdPools(model);
    const entered = [];
    let outcome = 'full';
    try {
        for (let i = 0; i < list.length; i++) {
            if (!pools.enterPool(held, list[i][0], list[i][1], who)) {
                break;
            }
            entered.push(list[i][0]);
        }
        if (entered.length === list.length) {
            outcome = 'timeout';
            let nextList = Date.now();
            while (Date.now() < deadline) {
                await sleep(Math.max(1, Math.min(HOLD_LOOK_MS, deadline - Date.now())));
                if (gone && gone()) {
                    outcome = 'gone';
                    break;
                }
                if (entered.some(function (pool) { return pools.evicted(held, pool, who); })) {
                    outcome = 'preempted';
                    break;
                }
                if (Date.now() >= nextList) {
                    nextList = Date.now() + cfg.hold.pollMs;
                    if (await listed(r, model)) {
                        outcome = 'released';
                        break;
                    }
                }
            }
        }
    } finally {
        for (let i = 0; i < entered.length; i++) {
            pools.leavePool(held, entered[i], who);
        }
    }
    counters.countHold(model, outcome);
    return outcome;
}

// How often a held request looks whether its client left or it is to give way.
const HOLD_LOOK_MS = 50;

// May this request be held (again)? The hold is on, the tenant unscoped, and it was held fewer
// than perRequest times (a held request counts against nginx's internal redirects).
function holdable(routingKey, holds) {
    return Boolean(cfg.hold) && !routingKey && holds < cfg.hold.perRequest;
}

function notHeld(r, model, outcome) {
    let message = 'No server for model `' + model + '` started in time; retry later.';
    if (outcome === 'full') {
        message = 'Too many requests are waiting for model `' + model + '` to start; retry later.';
    } else if (outcome === 'preempted') {
        message = 'Too many of your requests are waiting for model `' + model + '` to start, more than your share; '
            + 'retry later.';
    }
    unavailable(r, message);
}

// @gw_hold (nginx.conf): a streaming call or embeddings the router had no server for. The wait
// itself is proxied to the loopback fold server (@gw_wait, waitHold): a proxied request notices
// its client leaving at once, a js_content handler never does.
function hold(r) {
    const model = r.variables.gw_model;
    const serving = shares.servingOf(model);
    if (serving) {
        // A next revision with no server (not yet, or not any more): its share goes to the serving one.
        counters.countFallback(model);
        r.variables.gw_model = serving;
        r.internalRedirect('@gw_stream');
        return;
    }
    const holds = Number(r.variables.gw_holds || 0);
    if (!holdable(r.variables.gw_routing_key, holds)) {
        unavailable(r, 'No server can take requests for this model right now; retry later.');
        return;
    }
    r.variables.gw_holds = String(holds + 1);
    // The request's deadline counts from its start (request_time: seconds since its first byte).
    const started = requestStart(r);
    r.variables.gw_hold_until = String(Math.min(Date.now() + cfg.hold.timeoutMs, started + maxWaitMs(r)));
    r.internalRedirect('@gw_wait');
}

function requestStart(r) {
    return Date.now() - Math.floor(parseFloat(r.variables.request_time || '0') * 1000);
}

// js_content of the fold server's /_gw/wait (from the front's @gw_wait): holds, then answers 409
// (released: the front sends the call again, @gw_released) or the 503 the client gets.
async function waitHold(r) {
    const id = r.headersIn[cfg.foldHeaders.requestId] || '';
    const model = r.headersIn[cfg.routerHeaders.model] || '';
    const deadline = Number(r.headersIn[cfg.foldHeaders.holdUntil]) || Date.now();
    const gone = ngx.shared.gw_gone;
    const outcome = await holdFor(r, model, r.headersIn[cfg.foldHeaders.tenant] || '', deadline, function () {
        return Boolean(gone && gone.get(id));
    });
    if (outcome === 'released') {
        r.return(409);
    } else if (outcome === 'gone') {
        r.return(503);  // nobody reads it
    } else {
        notHeld(r, model, outcome);
    }
}

// @gw_released: sent again, with what is left of the deadline.
function released(r) {
    r.variables.gw_max_wait = String(Math.max(1, requestStart(r) + maxWaitMs(r) - Date.now()));
    r.internalRedirect('@gw_stream');
}

// ---- endpoints ----------------------------------------------------------------------------

const PATHS = {chat: '/v1/chat/completions', responses: '/v1/responses', embeddings: '/v1/embeddings',
               models: '/v1/models'};

// Whether the request line named the endpoint's path exactly ($gw_path, nginx.conf: a query is
// dropped, any other form is not ours); else answered 404. Only that path is sent to the router.
function canonical(r, kind) {
    if (r.variables.gw_path === PATHS[kind]) {
        return true;
    }
    unsupported(r);
    return false;
}

async function handle(r, kind) {
    if (!canonical(r, kind)) {
        return;
    }
    const admitted = await admit(r, kind);
    if (!admitted) {
        return;
    }
    setHeaders(r, admitted);
    if (kind === 'embeddings' || admitted.stream) {
        // nginx sends the client's body from its temp file: the router and pylon see exactly what
        // the client sent, and the script holds none of it.
        r.internalRedirect('@gw_stream');
        return;
    }
    // The client's bytes with `"stream": true` (chat: and stream_options.include_usage) in place
    // of its own members (body.js, streamBody): re-serialising would round every integer above
    // 2^53 (a `seed`) and rewrite every number and escape the client sent.
    // A fold is given back in its request's log phase, which a client's next call can overtake on
    // a loaded machine (its answer went out just before): a full share is looked at again for a
    // moment before the call is refused.
    for (let waited = 0; !admission.admitFold(r, admitted.tenant); waited += FOLD_WAIT_STEP_MS) {
        if (waited >= FOLD_WAIT_MS) {
            inFlightFull(r, 'folds');
            return;
        }
        await sleep(FOLD_WAIT_STEP_MS);
    }
    r.variables.gw_body = body.streamBody(requestBytes(r), admitted.scan, kind).toString();
    r.variables.gw_kind = kind;
    r.internalRedirect('@gw_fold');
}

// The non-streaming answer, folded from the event stream by two filters on @gw_fold. The
// upstream status is known when its headers arrive: anything but 200 passes through unchanged
// (router errors are intercepted by nginx before these filters run). A 200 stream is folded as it
// arrives, event by event: what is kept is the answer being built (joined deltas, the last
// Responses object) and the one unfinished event, never the raw stream; its bytes are counted
// against maxResponseBytes. An error event in the middle of a stream arrives after the 200 went
// out (njs cannot change the status from a body filter): the body is then the OpenAI error object.
//
// State per request, never in module variables alone: njs's legacy engine builds a VM per request,
// but its QuickJS engine reuses one between requests, so the fold state is a map entry keyed by
// nginx's $request_id (unique per request), removed at the end of the answer; an entry whose
// client left (no last buffer ever comes) is dropped after the request's deadline.
// (A plain object without a prototype: njs's legacy engine has no Map.)
const folds = Object.create(null);

function foldHeaders(r) {
    if (r.status !== 200) {
        r.variables.gw_fold = '';
        return;
    }
    // The kind, from the front server (the fold runs in the loopback fold server's subrequest).
    r.variables.gw_fold = r.headersIn[cfg.foldHeaders.kind] === 'responses' ? 'responses' : 'chat';
    r.headersOut['Content-Type'] = 'application/json';
    delete r.headersOut['Content-Length'];
    const now = Date.now();
    const ids = Object.keys(folds);
    for (let i = 0; i < ids.length; i++) {
        if (now - folds[ids[i]].since > cfg.timeoutMs + 60000) {
            delete folds[ids[i]];
        }
    }
    folds[r.variables.request_id] = fold.newFold(r.variables.gw_fold, cfg.maxResponseBytes, now);
}

function foldBody(r, data, flags) {
    if (!r.variables.gw_fold) {
        r.sendBuffer(data, flags);
        return;
    }
    const id = r.variables.request_id;
    const st = folds[id];
    if (!st) {
        return;
    }
    fold.feed(st, data);
    // For foldAnswer, which charges what was streamed when the client leaves (the subrequest
    // shares the request's variables).
    r.variables.gw_events_seen = String(st.events);
    // A subrequest's body filter never sees its last buffer (njs's flags.last is last_buf, which
    // only a main request's last buffer has), so the answer is handed over at the stream's
    // terminal event: chat's [DONE], the final Responses event, an error, or the cap.
    if (!(st.complete || st.error || st.tooLarge || flags.last)) {
        return;
    }
    delete folds[id];
    const answer = fold.finish(st);
    charges.foldUsage(r, st, answer);
    // To foldAnswer in variables, not as the subrequest's body: it chooses the status from them.
    r.variables.gw_answer = JSON.stringify(answer) + '\n';
    r.variables.gw_answer_status = String(answer.error ? errorStatus(st, answer.error) : 200);
    if (st.tooLarge && ngx.shared.gw_gone) {
        // The router keeps streaming: foldAnswer answers now and then ends its request, which
        // closes the router connection. (Not r.done(): njs would then never call foldAnswer back,
        // the flag is the one its subrequest callback checks.)
        ngx.shared.gw_gone.set('answered:' + (r.headersIn[cfg.foldHeaders.requestId] || ''), 1);
    }
}

// The status of a folded error: the engine's own when it gave one (an HTTP status as its code),
// 502 for what the gateway could not assemble (too large, unreadable, no answer).
function errorStatus(st, error) {
    if (!st.tooLarge && typeof error.code === 'number' && error.code >= 400 && error.code <= 599) {
        return error.code;
    }
    return cfg.answers[st.tooLarge ? 'response_too_large' : 'bad_gateway'].status;
}

// js_content of the loopback fold server (nginx.conf): the front server proxies a non-streaming
// call here (that proxied request notices a client that leaves, as only a proxied main request
// does); this request sends it to the router as a stream through a subrequest folded by the
// filters above, and answers once the fold is done, so the status is the answer's. A subrequest
// is not cancelled when its client leaves, so this request looks every 100 ms for the front
// request's id in gw_gone (written in the front's log phase when its client left, observe) and
// then ends itself with an error, which closes the router connection.
function foldAnswer(r) {
    const id = r.headersIn[cfg.foldHeaders.requestId] || '';
    const gone = ngx.shared.gw_gone;
    const st = {done: false, holding: false, holds: 0};
    const started = Date.now();
    const maxWait = Number(r.headersIn[cfg.routerHeaders.max_wait]) || cfg.timeoutMs;
    r.variables.gw_max_wait = String(maxWait);
    function clientLeft() {
        return Boolean(gone && gone.get(id));
    }
    function watch() {
        if (st.done) {
            return;
        }
        if (st.holding) {
            setTimeout(watch, 100);  // the hold sees the client leave itself, and uncounts it first
            return;
        }
        if (clientLeft()) {
            // What was streamed before the client left is charged (the engine did that work).
            if (r.variables.gw_fold) {
                charges.charge(r, r.headersIn[cfg.foldHeaders.tenant] || '', charges.promptEstimate(r));
            }
            throw new Error('gateway: the client left; request ' + id + ' cancelled at the router');
        }
        if (gone && gone.get('answered:' + id)) {
            st.done = true;
            refuse(r, 'response_too_large', fold.tooLargeError(cfg.maxResponseBytes).message);
            setTimeout(function () {
                throw new Error('gateway: request ' + id + ' over maxResponseBytes; cancelled at the router');
            }, 100);
            return;
        }
        setTimeout(watch, 100);
    }
    setTimeout(watch, 100);
    const upstream = r.headersIn[cfg.foldHeaders.kind] === 'responses' ? '/_gw/fold/responses' : '/_gw/fold/chat';
    let model = r.headersIn[cfg.routerHeaders.model] || '';
    if (cfg.splits) {
        r.variables.gw_model = model;  // what the fold's subrequest sends as x-model (nginx.conf)
    }
    async function holdThenSend() {
        st.holds += 1;
        st.holding = true;
        const outcome = await holdFor(r, model, r.headersIn[cfg.foldHeaders.tenant] || '',
                                      Math.min(Date.now() + cfg.hold.timeoutMs, started + maxWait), clientLeft);
        st.holding = false;
        if (outcome === 'released') {
            r.variables.gw_max_wait = String(Math.max(1, started + maxWait - Date.now()));
            sendToRouter();
        } else if (outcome === 'gone') {
            st.done = true;
            r.return(503);  // nobody reads it
        } else {
            st.done = true;
            notHeld(r, model, outcome);
        }
    }
    // No body given: the subrequest sends this request's body (the front's spliced stream body).
    function sendToRouter() {
        r.subrequest(upstream, {method: 'POST'}, onReply);
    }
    sendToRouter();
    function onReply(reply) {
        if (st.done) {
            return;
        }
        if (reply.status === 404 && shares.servingOf(model)) {
            // A next revision with no server: its share goes to the serving one (as hold does).
            counters.countFallback(model);
            model = shares.servingOf(model);
            r.variables.gw_model = model;
            sendToRouter();
            return;
        }
        if (reply.status === 404 && holdable(r.headersIn[cfg.routerHeaders.routing_key], st.holds)) {
            holdThenSend();
            return;
        }
        st.done = true;
        if (reply.status === 200 && reply.variables.gw_answer) {
            const v = reply.variables;
            if (v.gw_prompt_used) {
                r.headersOut[cfg.foldHeaders.promptUsed] = v.gw_prompt_used;
            }
            if (v.gw_completion_used) {
                r.headersOut[cfg.foldHeaders.completionUsed] = v.gw_completion_used;
            }
            if (v.upstream_header_time) {
                r.headersOut[cfg.foldHeaders.firstByte] = v.upstream_header_time;
            }
            r.headersOut['Content-Type'] = 'application/json';
            r.return(Number(v.gw_answer_status) || 200, v.gw_answer);
        } else if (reply.status === 200) {
            refuse(r, 'bad_gateway', 'The upstream stream ended before its end ([DONE] or the final event).');
        } else if (reply.status === 404 || reply.status === 502 || reply.status === 503) {
            // No serving target or the router unreachable: nginx's error_page makes the OpenAI error.
            r.return(503);
        } else if (reply.status === 504) {
            r.return(504);
        } else {
            // The engine's own error passes through.
            r.headersOut['Content-Type'] = 'application/json';
            r.return(reply.status, reply.responseText || '');
        }
    }
}

// ---- token limits: usage read from answers, charged at the limiter ---------------------------
// Per-request state lives in js_var variables (not module variables), so it holds on njs engines
// that reuse a VM between requests. The usage numbers are the engine's (chat: `prompt_tokens`,
// `completion_tokens`; Responses: `input_tokens`, `output_tokens`; the last ones seen win, as a
// stream's final usage is its total). A stream that carries none (a client that did not ask for
// `stream_options.include_usage`) is charged the x-input-tokens estimate plus one token per event.








// js_body_filter of @gw_fold: the fold, whose usage is counted from the answer (foldUsage).
function foldCounted(r, data, flags) {
    foldBody(r, data, flags);
}




// ---- handlers nginx.conf names that live in modules ---------------------------------------------

// js_set $gw_tenant (tenants.js).
function tenant(r) {
    return tenants.tenant(r);
}

// js_body_filter of @gw_stream (charges.js).
function countStream(r, data, flags) {
    charges.countStream(r, data, flags);
}

// js_set $gw_charge (charges.js).
function takeCharge(r) {
    return charges.takeCharge(r);
}

// js_periodic (charges.js).
function flushCharges() {
    return charges.flushCharges();
}

// ---- the log phase ---------------------------------------------------------------------------
// js_set $gw_observe is referenced only by an access log (nginx.conf), so it runs once per
// request in the log phase, when status and times are final; every answer passes there (429s,
// nginx's own errors, clients that left): the stream's charge, the budgets given back, the
// metrics (metrics.js).
function observe(r) {
    if (r.variables.status === '499' && (r.variables.gw_kind || r.variables.gw_holds) && ngx.shared.gw_gone) {
        // A non-streaming call whose client left: its fold request (foldAnswer) ends itself; a
        // held one: its wait (waitHold) leaves the pool.
        ngx.shared.gw_gone.set(r.variables.request_id, 1);
    }
    charges.chargeStream(r);
    admission.release(r);
    counters.count(r);
    return '';
}

// GET /metrics on the health port.
function metrics(r) {
    counters.page(r);
}

function chat(r) {
    return handle(r, 'chat');
}

function responses(r) {
    return handle(r, 'responses');
}

function embeddings(r) {
    return handle(r, 'embeddings');
}

// GET /v1/models: the router's {"model_ids": [...]} (the models routable on the router pod that
// answers) as OpenAI's list, narrowed to what the caller may use.
async function models(r) {
    if (!canonical(r, 'models')) {
        return;
    }
    if (r.method !== 'GET') {
        refuse(r, 'method_not_allowed', r.method + ' is not allowed on /v1/models; use GET', null, {'Allow': 'GET'});
        return;
    }
    const who = cfg.apiKeys ? r.variables.gw_tenant : '';
    if (cfg.apiKeys && !who) {
        refuse(r, 'invalid_api_key', tenants.bearer(r) ? 'Incorrect API key provided.' : 'You did not provide an API key.', null,
               {'WWW-Authenticate': 'Bearer'});
        return;
    }
    let ids;
    try {
        ids = await routerModelIds(r);
    } catch (e) {
        unavailable(r, e.message);
        return;
    }
    const allowed = tenants.allowedModels(who);
    const created = Math.floor(Date.now() / 1000);
    // A model asleep (no server, so not in the router's list) is still one clients may call.
    for (let i = 0; i < cfg.sleepers.length; i++) {
        if (ids.indexOf(cfg.sleepers[i]) < 0) {
            ids.push(cfg.sleepers[i]);
        }
    }
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
    refuse(r, 'unsupported_endpoint', message);
}

export default {tenant, authorize, chat, responses, embeddings, models, unsupported, foldHeaders, foldBody, foldAnswer, hold,
                waitHold, released, admitRequest,
                countStream, foldCounted, takeCharge, flushCharges, observe, metrics,
                // Not handlers: the pure functions, for the script's own tests (njs exports only a
                // default object).
                pure: {affinityKey, routedModel: shares.routedModel, splitBucket: shares.splitBucket, maxWaitMs}};
