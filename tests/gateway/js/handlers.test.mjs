// gateway.js's handlers on node, against a fake request `r` and fake shared dictionaries (njs's
// `ngx.shared`): what a request is answered or sent on with, the in-flight budgets, the holds'
// fair share, the charge of a stream and the metrics. nginx itself runs them in tests/gateway/*.py;
// here each decision is checked alone. (tests/gateway/test_gateway_js.py runs this.)
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';

import gw from '../../../components/compile/gateway/gateway.js';
import pools from 'pools.js';
import cfg from 'gateway_config.js';

// njs's js_shared_dict_zone of type number, as the script uses it.
class Dict {
    constructor() {
        this.map = new Map();
    }
    get(key) {
        return this.map.get(key);
    }
    set(key, value) {
        this.map.set(key, value);
        return this;
    }
    incr(key, delta, init) {
        const value = (this.map.has(key) ? this.map.get(key) : (init || 0)) + delta;
        this.map.set(key, value);
        return value;
    }
    keys() {
        return [...this.map.keys()];
    }
    delete(key) {
        return this.map.delete(key);
    }
}

beforeEach(function () {
    globalThis.ngx = {shared: {gw_admit: new Dict(), gw_metrics: new Dict(), gw_pending: new Dict(), gw_gone: new Dict(),
                               gw_held: new Dict()},
                      log: function () {}, WARN: 1};
});

let ids = 0;

// A request as njs gives it to a handler; what the handler did is recorded on it.
function request(method, path, body, variables, headers) {
    ids += 1;
    const bytes = body === undefined ? undefined
        : (Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)));
    return {
        method: method, uri: path, headersIn: headers || {}, headersOut: {}, requestBuffer: bytes,
        variables: Object.assign({gw_path: path, request_id: 'id' + ids, content_length: bytes ? String(bytes.length) : '',
                                  request_body_file: '', status: '200', request_time: '0.010', upstream_status: ''},
                                 variables || {}),
        returned: null, redirected: null,
        return: function (status, text) {
            this.returned = {status: status, body: text === undefined ? undefined : String(text)};
        },
        internalRedirect: function (location) {
            this.redirected = location;
        },
        // A body filter's: what passes on to the client, and whether the filter stepped aside.
        sent: [], stepped: false,
        sendBuffer: function (data) {
            this.sent.push(data);
        },
        done: function () {
            this.stepped = true;
        },
    };
}

function errorOf(r) {
    return JSON.parse(r.returned.body).error;
}

const CHAT = {model: 'm', messages: [{role: 'system', content: 'Be brief.'}, {role: 'user', content: 'Hi there'}]};

test('a streaming call is sent on as it is, with the contract headers in variables', async function () {
    const r = request('POST', '/v1/chat/completions', Object.assign({stream: true}, CHAT));
    await gw.chat(r);
    assert.equal(r.redirected, '@gw_stream');
    assert.equal(r.returned, null);
    // ceil(17 bytes / 4) + 4 per message.
    assert.equal(r.variables.gw_input_tokens, '13');
    assert.match(r.variables.gw_affinity, /^[0-9a-f]{32}$/);
    assert.ok(['m', 'm-next'].includes(r.variables.gw_model));
    assert.equal(r.variables.gw_max_wait, String(cfg.timeoutMs));
    assert.equal(r.variables.gw_body, undefined, 'nginx sends the body from its file');
});

test('a non-streaming call is folded: its body rewritten, its fold taken from the budget and given back', async function () {
    const raw = '{"model": "m", "seed": 9223372036854775807, "messages": [{"role": "user", "content": "x"}]}';
    const r = request('POST', '/v1/chat/completions', raw);
    await gw.chat(r);
    assert.equal(r.redirected, '@gw_fold');
    assert.equal(r.variables.gw_kind, 'chat');
    assert.equal(r.variables.gw_body, '{"stream":true,"stream_options":{"include_usage":true},"model": "m", '
                 + '"seed": 9223372036854775807, "messages": [{"role": "user", "content": "x"}]}');
    assert.equal(ngx.shared.gw_admit.get('folds'), 1);
    gw.observe(r);  // the log phase
    assert.equal(ngx.shared.gw_admit.get('folds'), 0);
});

test('each refusal is its code\'s status and type (statuses.py, through the settings)', async function () {
    const cases = [
        [request('POST', '/v1/chat/completions', '{"model": "m", "messages": ['), 'invalid_json'],
        [request('POST', '/v1/chat/completions', '{"messages": []}'), 'missing_model'],
        [request('POST', '/v1/chat/completions', '{"model": "gpt-4"}'), 'model_not_found'],
        [request('POST', '/v1/chat/completions', '{"model": "m", "stream": "yes"}'), 'invalid_value'],
        [request('GET', '/v1/chat/completions', undefined), 'method_not_allowed'],
        [request('POST', '/v1/chat/completions', CHAT, {gw_path: ''}), 'unsupported_endpoint'],
    ];
    for (const [r, code] of cases) {
        await gw.chat(r);
        assert.equal(r.redirected, null, code);
        assert.equal(errorOf(r).code, code);
        assert.equal(r.returned.status, cfg.answers[code].status, code);
        assert.equal(errorOf(r).type, cfg.answers[code].type, code);
    }
    const bad = request('POST', '/v1/chat/completions', Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]));
    await gw.chat(bad);
    assert.match(errorOf(bad).message, /UTF-8/);
});

test('the in-flight budgets: taken before the body, refused when full, given back in the log phase', function () {
    const limits = cfg.inFlight;
    const admitted = [];
    for (let i = 0; i < limits.requests; i++) {
        const r = request('POST', '/v1/chat/completions', undefined, {content_length: '10'});
        assert.equal(gw.admitRequest(r), '', 'request ' + i);
        admitted.push(r);
    }
    const over = request('POST', '/v1/chat/completions', undefined, {content_length: '10'});
    assert.equal(gw.admitRequest(over), 'requests');
    assert.equal(over.variables.gw_busy, 'requests');
    assert.equal(ngx.shared.gw_admit.get('requests'), limits.requests);
    assert.equal(ngx.shared.gw_admit.get('bodyBytes'), 10 * limits.requests);
    admitted.forEach(function (r) { gw.observe(r); });
    assert.equal(ngx.shared.gw_admit.get('requests'), 0);
    assert.equal(ngx.shared.gw_admit.get('bodyBytes'), 0);
    // A body without Content-Length (chunked) counts the largest body.
    const chunked = request('POST', '/v1/chat/completions', undefined, {content_length: ''});
    assert.equal(gw.admitRequest(chunked), '');
    assert.equal(ngx.shared.gw_admit.get('bodyBytes'), cfg.maxBodyBytes);
    // Declared sizes are counted up to the largest body (a larger one is nginx's 413).
    let taken = cfg.maxBodyBytes;
    while (taken + cfg.maxBodyBytes <= limits.bodyBytes) {
        assert.equal(gw.admitRequest(request('POST', '/v1/chat/completions', undefined, {content_length: String(1 << 30)})), '');
        taken += cfg.maxBodyBytes;
    }
    assert.equal(gw.admitRequest(request('POST', '/v1/chat/completions', undefined, {content_length: String(cfg.maxBodyBytes)})),
                 'bodyBytes');
});

test('a stream is charged what it carried, or the estimate and its events when it left early', function () {
    const saved = cfg.tenants;
    cfg.tenants = {t: {routingKey: null, models: null, tokenLimited: true}};
    const savedKeys = cfg.apiKeys;
    try {
        const full = request('POST', '/v1/chat/completions', undefined,
                             {gw_tenant: 't', gw_input_tokens: '30', upstream_status: '200'});
        full.status = 200;
        gw.countStream(full, Buffer.from('data: {"choices":[]}\n\ndata: {"usage":{"prompt_tokens":7,"completion_tokens":5}}\n\n'),
                       {last: false});
        gw.observe(full);
        assert.equal(ngx.shared.gw_pending.get('t'), 12);
        const cut = request('POST', '/v1/chat/completions', undefined,
                            {gw_tenant: 't', gw_input_tokens: '30', upstream_status: '404 : 200', status: '499'});
        cut.status = 200;
        gw.countStream(cut, Buffer.from('data: {"choices":[]}\n\ndata: {"choices":[]}\n\n'), {last: false});
        gw.observe(cut);
        assert.equal(ngx.shared.gw_pending.get('t'), 12 + 30 + 2);
        assert.equal(cut.sent.length, 1, 'the bytes pass on');
        // Past the part read, the filter steps aside, and the events are estimated from the bytes sent.
        const long = request('POST', '/v1/chat/completions', undefined, {gw_tenant: 't', gw_input_tokens: '0',
                                                                          upstream_status: '200'});
        long.status = 200;
        const event = Buffer.from('data: ' + 'x'.repeat(1016) + '\n\n');
        let streamed = 0;
        while (!long.stepped) {
            gw.countStream(long, event, {last: false});
            streamed += event.length;
        }
        assert.equal(streamed, cfg.streamReadBytes);
        long.variables.body_bytes_sent = String(4 * streamed);
        gw.observe(long);
        assert.equal(ngx.shared.gw_pending.get('t'), 44 + 4 * (streamed / event.length));
        // The router never answered it (a 503 before any stream): nothing is charged.
        const before = ngx.shared.gw_pending.get('t');
        const refused = request('POST', '/v1/chat/completions', undefined, {gw_tenant: 't', upstream_status: '503'});
        gw.observe(refused);
        assert.equal(ngx.shared.gw_pending.get('t'), before);
    } finally {
        cfg.tenants = saved;
        cfg.apiKeys = savedKeys;
    }
});

test('the metrics count every answer by tenant, model and status', function () {
    const r = request('POST', '/v1/chat/completions', undefined,
                      {gw_tenant: '', gw_model: 'm', status: '200', upstream_header_time: '0.020', request_time: '0.250'});
    gw.observe(r);
    const page = request('GET', '/metrics');
    gw.metrics(page);
    assert.equal(page.returned.status, 200);
    assert.match(page.returned.body, /^gateway_requests_total\{tenant="",model="m",status="200"\} 1$/m);
    assert.match(page.returned.body, /^gateway_request_duration_seconds_bucket\{tenant="",model="m",le="0.25"\} 1$/m);
    assert.match(page.returned.body, /^gateway_request_duration_seconds_bucket\{tenant="",model="m",le="0.1"\} 0$/m);
    assert.match(page.returned.body, /^gateway_time_to_first_byte_seconds_count\{tenant="",model="m"\} 1$/m);
});

test('a full hold pool is shared: a tenant under its share takes the place of the one most over it', function () {
    const held = new Dict();
    const saved = cfg.tenants;
    cfg.tenants = {a: {}, b: {}};
    try {
        const P = pools;
        assert.equal(P.enterPool(held, 'model:m', 2, 'a'), true);
        assert.equal(P.enterPool(held, 'model:m', 2, 'a'), true);
        // `a` holds the pool; `b` is under its share (1 of 2): admitted, and one of `a`'s gives way.
        assert.equal(P.enterPool(held, 'model:m', 2, 'b'), true);
        assert.equal(P.evicted(held, 'model:m', 'b'), false);
        assert.equal(P.evicted(held, 'model:m', 'a'), true);
        assert.equal(P.evicted(held, 'model:m', 'a'), false, 'one eviction for one place');
        P.leavePool(held, 'model:m', 'a');
        // Now one each: `a` at its share is refused, and so is `b`.
        assert.equal(P.enterPool(held, 'model:m', 2, 'a'), false);
        assert.equal(P.enterPool(held, 'model:m', 2, 'b'), false);
        assert.equal(held.get('model:m'), 2);
    } finally {
        cfg.tenants = saved;
    }
});

test('a non-streaming call over the fold budget is refused after a moment, its body read, nothing sent on', async function () {
    ngx.shared.gw_admit.set('folds', cfg.inFlight.folds);
    const r = request('POST', '/v1/chat/completions', CHAT);
    const started = Date.now();
    await gw.chat(r);
    assert.ok(Date.now() - started >= 150, 'looked at again for a moment first');
    assert.equal(r.redirected, null);
    // Without keys the replica's budget is everyone's: a 503 with the replica's Retry-After.
    assert.equal(r.returned.status, cfg.answers.service_unavailable.status);
    assert.equal(r.headersOut['Retry-After'], String(cfg.retryAfterSeconds));
    assert.match(errorOf(r).message, /non-streaming answers being assembled/);
    // One ending meanwhile lets it through.
    const next = request('POST', '/v1/chat/completions', CHAT);
    setTimeout(function () { ngx.shared.gw_admit.incr('folds', -1, 0); }, 50);
    await gw.chat(next);
    assert.equal(next.redirected, '@gw_fold');
});
