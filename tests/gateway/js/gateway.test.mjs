// The script's pure functions, on the real file (components/compile/gateway/gateway.js), with
// the settings module the compiler renders (tests/gateway/test_gateway_js.py runs this).
import { test } from 'node:test';
import assert from 'node:assert/strict';

import gw from '../../../components/compile/gateway/gateway.js';
import body from 'body.js';
import fold from 'fold.js';
import cfg from 'gateway_config.js';

const P = gw.pure;
const F = fold;

function sse(objects, names) {
    return objects.map(function (o, i) {
        const data = typeof o === 'string' ? o : JSON.stringify(o);
        return (names ? 'event: ' + names[i] + '\n' : '') + 'data: ' + data + '\n\n';
    }).join('');
}

const HEAD = {id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 7, model: 'm'};

function chunk(choices, extra) {
    return Object.assign({}, HEAD, {choices: choices}, extra || {});
}

test('chat fold joins deltas per choice, keeps usage and vLLM field order', function () {
    const text = sse([
        chunk([{index: 0, delta: {role: 'assistant', content: ''}}]),
        chunk([{index: 1, delta: {content: 'B'}}, {index: 0, delta: {content: 'Hel', reasoning_content: 'r1'}}]),
        chunk([{index: 0, delta: {content: 'lo', reasoning_content: 'r2'},
                logprobs: {content: [{token: 'lo', logprob: -0.1}]}, finish_reason: 'stop', stop_reason: 42}]),
        chunk([{index: 1, delta: {}, finish_reason: 'length'}]),
        chunk([], {usage: {prompt_tokens: 3, completion_tokens: 2, total_tokens: 5}, system_fingerprint: 'vllm-0.32.0'}),
        '[DONE]',
    ]);
    const answer = F.foldText('chat', text);
    // vLLM 0.32 names its build in the usage chunk only.
    assert.equal(answer.system_fingerprint, 'vllm-0.32.0');
    assert.equal('tool_calls' in answer.choices[0].message, false, 'no tool call: no tool_calls field');
    assert.deepEqual(Object.keys(answer), ['id', 'object', 'created', 'model', 'choices', 'service_tier',
        'system_fingerprint', 'usage', 'prompt_logprobs', 'prompt_token_ids', 'kv_transfer_params']);
    assert.equal(answer.object, 'chat.completion');
    assert.deepEqual(answer.choices.map(function (c) { return c.index; }), [0, 1]);
    const first = answer.choices[0];
    assert.equal(first.message.content, 'Hello');
    assert.equal(first.message.reasoning_content, 'r1r2');
    assert.equal(first.finish_reason, 'stop');
    assert.equal(first.stop_reason, 42);
    assert.deepEqual(first.logprobs, {content: [{token: 'lo', logprob: -0.1}]});
    assert.equal(answer.choices[1].message.content, 'B');
    assert.equal('reasoning_content' in answer.choices[1].message, false, 'no reasoning streamed: no reasoning field');
    assert.equal(first.token_ids, null);
    assert.equal(answer.prompt_token_ids, null);
    assert.equal(answer.choices[1].finish_reason, 'length');
    assert.deepEqual(answer.usage, {prompt_tokens: 3, completion_tokens: 2, total_tokens: 5});
});

test('chat fold keeps the reasoning field name and the token ids the engine streamed', function () {
    // vLLM after 0.11 streams `reasoning` (its non-streaming message has no `reasoning_content`);
    // with return_token_ids each chunk carries its token ids and the first the prompt's.
    const text = sse([
        chunk([{index: 0, delta: {role: 'assistant', content: ''}, token_ids: []}], {prompt_token_ids: [1, 2]}),
        chunk([{index: 0, delta: {reasoning: 'th'}, token_ids: [5]}]),
        chunk([{index: 0, delta: {reasoning: 'ink', content: 'ok'}, token_ids: [6, 7], finish_reason: 'stop'}]),
        '[DONE]',
    ]);
    const answer = F.foldText('chat', text);
    const message = answer.choices[0].message;
    assert.equal(message.reasoning, 'think');
    assert.equal('reasoning_content' in message, false);
    assert.deepEqual(answer.choices[0].token_ids, [5, 6, 7]);
    assert.deepEqual(answer.prompt_token_ids, [1, 2]);
});

test('chat fold joins tool-call deltas by index', function () {
    const text = sse([
        chunk([{index: 0, delta: {tool_calls: [{index: 0, id: 'c1', type: 'function', function: {name: 'get', arguments: ''}}]}}]),
        chunk([{index: 0, delta: {tool_calls: [{index: 1, id: 'c2', function: {name: 'put', arguments: '{}'}}]}}]),
        chunk([{index: 0, delta: {tool_calls: [{index: 0, function: {arguments: '{"a": 1}'}}]}, finish_reason: 'tool_calls'}]),
    ]);
    assert.deepEqual(F.foldText('chat', text).choices[0].message.tool_calls, [
        {id: 'c1', type: 'function', function: {name: 'get', arguments: '{"a": 1}'}},
        {id: 'c2', type: 'function', function: {name: 'put', arguments: '{}'}},
    ]);
});

test('errors in the stream become OpenAI error objects', function () {
    const cases = [
        ['chat', sse([chunk([{index: 0, delta: {content: 'x'}}]), {error: {message: 'boom', type: 'InternalServerError', param: null, code: 500}}]),
         {message: 'boom', type: 'InternalServerError', param: null, code: 500}],
        ['chat', sse([{object: 'error', message: 'bad', type: 'BadRequestError', code: 400}]),
         {message: 'bad', type: 'BadRequestError', param: null, code: 400}],
        ['chat', sse([{error: 'plain'}]), {message: 'plain', type: 'server_error', param: null, code: 500}],
        ['chat', 'data: [DONE]\n\n', {message: 'The upstream stream ended without an answer.', type: 'server_error', param: null, code: 'bad_gateway'}],
        ['chat', 'data: {not json\n\n', null],
        ['responses', sse([{type: 'error', message: 'engine died', code: 'engine_error'}], ['error']),
         {message: 'engine died', type: 'server_error', param: null, code: 'engine_error'}],
        ['responses', sse([{type: 'response.created', response: {id: 'r'}}], ['response.created']),
         {message: 'The upstream stream ended without a completed response.', type: 'server_error', param: null, code: 'bad_gateway'}],
    ];
    for (const [kind, text, error] of cases) {
        const out = F.foldText(kind, text);
        assert.deepEqual(Object.keys(out), ['error'], text);
        if (error) {
            assert.deepEqual(out.error, error);
        } else {
            assert.equal(out.error.code, 'bad_gateway');
        }
    }
});

test('responses fold answers with the final response object', function () {
    for (const last of ['response.completed', 'response.incomplete', 'response.failed']) {
        const final = {id: 'resp_1', object: 'response', status: last.split('.')[1], output: [{type: 'message'}]};
        const text = sse([{type: 'response.created', response: {id: 'resp_1', status: 'in_progress'}},
                          {type: 'response.output_text.delta', delta: 'x'},
                          {type: last, response: final}], ['response.created', 'response.output_text.delta', last]);
        assert.deepEqual(F.foldText('responses', text), final);
    }
});

test('the fold is the same however the stream is cut into buffers, multi-byte characters included', function () {
    const text = sse([chunk([{index: 0, delta: {role: 'assistant', content: 'caf\u00e9 \u{1F600} '}}]),
                      chunk([{index: 0, delta: {content: '\u4e2d\u6587'}, finish_reason: 'stop'}]), '[DONE]'])
        .replace(/\n\n/g, '\r\n\r\n');
    const whole = F.foldText('chat', text);
    assert.equal(whole.choices[0].message.content, 'caf\u00e9 \u{1F600} \u4e2d\u6587');
    const bytes = Buffer.from(text);
    for (const size of [1, 2, 3, 7, 64]) {
        const st = F.newFold('chat', Infinity, 0);
        for (let i = 0; i < bytes.length; i += size) {
            F.feed(st, bytes.subarray(i, i + size));
        }
        assert.deepEqual(F.finish(st), whole, 'buffers of ' + size);
    }
});

test('a stream over the bound is refused and its state dropped', function () {
    const st = F.newFold('chat', 100, 0);
    F.feed(st, Buffer.from(sse([chunk([{index: 0, delta: {content: 'x'.repeat(200)}}])])));
    assert.equal(F.finish(st).error.code, 'response_too_large');
    assert.deepEqual(st.choices, {});
    assert.deepEqual(st.sse.partial, []);
});

test('two folds never share state', function () {
    const a = F.newFold('chat', Infinity, 0);
    const b = F.newFold('chat', Infinity, 0);
    F.feed(a, Buffer.from(sse([chunk([{index: 0, delta: {content: 'A'}}])])));
    F.feed(b, Buffer.from(sse([chunk([{index: 0, delta: {content: 'B'}}])])));
    assert.equal(F.finish(a).choices[0].message.content, 'A');
    assert.equal(F.finish(b).choices[0].message.content, 'B');
});

test('parseEvents reads names, joins data lines, skips comments and blank blocks', function () {
    assert.deepEqual(F.parseEvents(': ping\n\nevent: x\ndata: a\ndata:b\n\n\n\ndata: [DONE]\n\n'),
                     [{event: 'x', data: 'a\nb'}, {event: '', data: '[DONE]'}]);
});

function request(headers) {
    return {headersIn: headers || {}};
}

// What handle() gives affinityKey: the body as body.js read it, the tenant.
function admitted(kind, obj, tenant) {
    const scan = body.scanBody(body.bufferReader(Buffer.from(JSON.stringify(obj))), kind, cfg.affinity.maxLeadingMessages);
    return {scan: scan, model: scan.model, tenant: tenant};
}

function key(r, kind, obj, tenant) {
    return P.affinityKey(r, admitted(kind, obj, tenant));
}

test('affinity keys: one per conversation prefix, tenant and model; the session header wins', function () {
    const sys = {role: 'system', content: 'S'};
    const turn1 = {model: 'm', messages: [sys, {role: 'user', content: 'U1'}]};
    const turn2 = {model: 'm', messages: [sys, {role: 'user', content: 'U1'}, {role: 'assistant', content: 'A'},
                                          {role: 'user', content: 'U2'}]};
    const first = key(request(), 'chat', turn1, 't');
    assert.match(first, /^[0-9a-f]{32}$/);
    assert.equal(key(request(), 'chat', turn2, 't'), first);
    assert.notEqual(key(request(), 'chat', turn1, 'other-tenant'), first);
    assert.notEqual(key(request(), 'chat', Object.assign({}, turn1, {model: 'n'}), 't'), first);
    assert.notEqual(key(request(), 'chat', {model: 'm', messages: [sys, {role: 'user', content: 'U9'}]}, 't'), first);
    // At most maxLeadingMessages (4) messages: a fifth system message changes nothing.
    const many = {model: 'm', messages: [sys, sys, sys, sys, {role: 'system', content: 'X'}]};
    const fewer = {model: 'm', messages: [sys, sys, sys, sys, {role: 'system', content: 'Y'}]};
    assert.equal(key(request(), 'chat', many, 't'), key(request(), 'chat', fewer, 't'));
    const session = key(request({'x-session-id': 's1'}), 'chat', turn1, 't');
    assert.notEqual(session, first);
    assert.equal(key(request({'x-session-id': 's1'}), 'chat', turn2, 't'), session);
    // Responses: the instructions and the leading input items.
    const r1 = {model: 'm', instructions: 'I', input: [{role: 'user', content: 'U1'}]};
    assert.equal(key(request(), 'responses', r1, 't'),
                 key(request(), 'responses', Object.assign({}, r1, {input: r1.input.concat([{role: 'user', content: 'U2'}])}), 't'));
    assert.notEqual(key(request(), 'responses', r1, 't'), key(request(), 'responses', Object.assign({}, r1, {instructions: 'J'}), 't'));
    assert.equal(key(request(), 'embeddings', {model: 'm', input: ['a', 'b']}, 't'),
                 key(request(), 'embeddings', {model: 'm', input: 'a'}, 't'));
});

// models[].next: the rendered settings give model `m` a next revision `m-next` at 30 percent
// (tests/gateway/test_gateway_js.py).
function conversations(n) {
    const keys = [];
    for (let i = 0; i < n; i++) {
        keys.push(key(request(), 'chat', {model: 'm', messages: [{role: 'user', content: 'conversation ' + i}]}, 't'));
    }
    return keys;
}

test('a next revision gets its percent of conversations, within 3 points over 4,000', function () {
    assert.deepEqual(cfg.splits.m, {revision: 'm-next', percent: 30});
    const keys = conversations(4000);
    const next = keys.filter(function (k) { return P.routedModel('m', k) === 'm-next'; }).length;
    assert.ok(Math.abs(next / keys.length - 0.30) < 0.03, next + ' of ' + keys.length + ' went to the next revision');
    assert.equal(P.routedModel('other', keys[0]), 'other', 'a model without a next revision is routed to itself');
});

test('a conversation stays on its revision; a new percent moves conversations one way only', function () {
    const keys = conversations(500);
    const before = keys.map(function (k) { return P.routedModel('m', k); });
    assert.deepEqual(keys.map(function (k) { return P.routedModel('m', k); }), before, 'the same key, the same revision');
    try {
        cfg.splits.m.percent = 60;
        const raised = keys.map(function (k) { return P.routedModel('m', k); });
        assert.ok(before.every(function (r, i) { return r === 'm' || raised[i] === 'm-next'; }),
                  'raising the percent keeps every conversation of the next revision there');
        assert.ok(raised.filter(function (r) { return r === 'm-next'; }).length
                  > before.filter(function (r) { return r === 'm-next'; }).length);
        cfg.splits.m.percent = 0;
        assert.ok(keys.every(function (k) { return P.routedModel('m', k) === 'm'; }), '0: all on the serving revision');
        cfg.splits.m.percent = 100;
        assert.ok(keys.every(function (k) { return P.routedModel('m', k) === 'm-next'; }), '100: all on the next one');
    } finally {
        cfg.splits.m.percent = 30;
    }
});

test('the deadline is the gateway\'s or the client\'s shorter one', function () {
    const cases = [[{}, 600000], [{'X-Stainless-Read-Timeout': '12.5'}, 12500], [{'X-Stainless-Read-Timeout': '99999'}, 600000],
                   [{'X-Stainless-Timeout': '0.0001'}, 1], [{'X-Stainless-Read-Timeout': 'soon'}, 600000]];
    for (const [headers, ms] of cases) {
        assert.equal(P.maxWaitMs(request(headers)), ms, JSON.stringify(headers));
    }
});
