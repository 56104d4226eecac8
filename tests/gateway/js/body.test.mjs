// body.js on node: what the gateway reads from a request body (components/compile/gateway/body.js,
// unmodified; tests/gateway/test_gateway_js.py runs this).
import { test } from 'node:test';
import assert from 'node:assert/strict';

import body from '../../../components/compile/gateway/body.js';

function scan(text, kind, chunk) {
    const bytes = Buffer.from(text);
    // A reader handing out `chunk` bytes at a time: every token may straddle two reads.
    let at = 0;
    const read = chunk ? function (buf) {
        const n = Math.min(chunk, bytes.length - at);
        bytes.copy(buf, 0, at, at + n);
        at += n;
        return n;
    } : body.bufferReader(bytes);
    return body.scanBody(read, kind || 'chat', 4);
}

test('the body sent upstream is the client text with the stream members replaced, nothing else touched', function () {
    const cases = [
        ['chat', '{"model": "m", "seed": 9223372036854775807, "x": 1.50, "stream": false}',
         '{"stream":true,"stream_options":{"include_usage":true},"model": "m", "seed": 9223372036854775807, "x": 1.50}'],
        ['chat', '{ "stream_options" : {"continuous_usage_stats": true, "include_usage": false} , "n": [1, {"a": "}"}], "s": "q\\"," }',
         '{"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats": true}  , "n": [1, {"a": "}"}], "s": "q\\"," }'],
        ['responses', '{"input":"hi","stream":null,"max_output_tokens":18446744073709551615}',
         '{"stream":true,"input":"hi","max_output_tokens":18446744073709551615}'],
        ['chat', '{}', '{"stream":true,"stream_options":{"include_usage":true}}'],
        ['chat', '{"stream":false}', '{"stream":true,"stream_options":{"include_usage":true}}'],
        ['chat', '{"a":1,"stream":false,"stream_options":null}', '{"stream":true,"stream_options":{"include_usage":true},"a":1}'],
        ['responses', '{"stream":false,"stream_options":{"x":1}}', '{"stream":true,"stream_options":{"x":1}}'],
    ];
    for (const [kind, text, expected] of cases) {
        const out = body.streamBody(Buffer.from(text), scan(text, kind), kind).toString();
        assert.equal(out, expected, text);
        JSON.parse(out);
    }
});

test('input token estimates: UTF-8 bytes of the counted text / 4, plus 4 per message or item', function () {
    const cases = [
        ['chat', {messages: [{role: 'system', content: 'Be brief.'}, {role: 'user', content: 'Hi there'}]}, 5 + 8],
        ['chat', {messages: [{role: 'user', content: [{type: 'text', text: 'abcd'}, {type: 'image_url', image_url: {url: 'http://x'}}]}]}, 1 + 4],
        // The arguments as sent: {\"x\":1}, 9 bytes.
        ['chat', {messages: [{role: 'assistant', tool_calls: [{function: {name: 'ab', arguments: '{"x":1}'}}]}]}, 3 + 4],
        ['chat', {messages: [{role: 'user', content: 'é'.repeat(8)}]}, 4 + 4],
        ['chat', {}, 0],
        ['responses', {input: 'abcdefgh', instructions: 'abcd'}, 3 + 4],
        ['responses', {input: [{role: 'user', content: 'ab'}, {role: 'user', content: 'cd'}]}, 1 + 8],
        ['embeddings', {input: [[1, 2, 3], [4, 5]]}, 5],
        ['embeddings', {input: [1, 2]}, 2],
        ['embeddings', {input: ['abcd', 'efgh']}, 2],
        ['embeddings', {input: 'abcde'}, 2],
        ['embeddings', {input: [[1, [2]]]}, 0],  // not token ids: no text either
    ];
    for (const [kind, obj, tokens] of cases) {
        assert.equal(scan(JSON.stringify({model: 'm', ...obj}), kind).inputTokens, tokens, JSON.stringify(obj));
    }
});

test('what is read is the same however the body is cut into reads', function () {
    const text = JSON.stringify({model: 'qwen-small', stream: false, stream_options: {include_usage: false, x: [1.5e-3, -0]},
                                 messages: [{role: 'system', content: 'S \\ "q" \u00e9\ud834\udd1e'},
                                            {role: 'user', content: [{type: 'text', text: 'U1'}]}],
                                 tools: [{type: 'function', function: {name: 'f', parameters: {a: {b: [null, true, false]}}}}]});
    const whole = scan(text);
    assert.equal(whole.error, undefined);
    for (const size of [1, 2, 3, 7, 64]) {
        assert.deepEqual(scan(text, 'chat', size), whole, 'reads of ' + size);
    }
});

test('the model is the decoded top-level member, given once', function () {
    assert.equal(scan('{"mod\\u0065l": "q\\u0077en"}').model, 'qwen');
    assert.equal(scan('{"x": {"model": "inner"}, "model": "outer"}').model, 'outer');
    assert.match(scan('{"model": "a", "mod\\u0065l": "b"}').error, /`model` is given twice/);
    assert.match(scan('{"model": "a", "stream": true, "stream": false}').error, /`stream` is given twice/);
    assert.equal(scan('{"model": "' + 'x'.repeat(2000) + '"}').modelTooLong, true);
    assert.equal(scan('{"model": 5}').model, null);
    assert.deepEqual([true, false, null, 'invalid', 'invalid', undefined].map(function (v, i) {
        return scan(['{"stream": true}', '{"stream": false}', '{"stream": null}', '{"stream": "yes"}', '{"stream": [true]}', '{}'][i]).stream;
    }), [true, false, null, 'invalid', 'invalid', undefined]);
});

test('bodies vLLM would not read are refused with the reason', function () {
    const cases = [
        ['', /empty/], ['{', /ends before/], ['[1]', /not a JSON object/], ['"x"', /not a JSON object/],
        ['{"a":01}', /leading zero/], ['{"a":1,}', /misplaced \}/], ['{"a" 1}', /a value where/],
        ['{"a":1} x', /unexpected byte/], ['{"a":"\\x"}', /invalid escape/], ['{"a":"\\u12g4"}', /\\u escape/],
        ['{"a":-}', /sign without digits/], ['{"a":1.}', /decimal point/], ['{"a":1e}', /exponent/],
        ['{"a":tru}', /invalid literal/], ['{"a":[1}', /misplaced \}/], ['{"a":{]}', /misplaced \]/],
        ['{"a":1', /ends before/], ['{"a":"b', /ends before/], ['{"a":NaN}', /unexpected byte/],
    ];
    for (const [text, reason] of cases) {
        assert.match(scan(text).error || '', reason, JSON.stringify(text));
    }
    for (const bytes of [[0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d], [0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x22, 0x7d],
                         [0x7b, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x3a, 0x31, 0x7d]]) {
        const read = body.bufferReader(Buffer.from(bytes));
        assert.match(body.scanBody(read, 'chat', 4).error, /UTF-8/);
    }
});

test('nesting: as deep as vLLM reads (Python 3.12\'s json: 1,497 containers), no deeper', function () {
    assert.equal(body.JSON_MAX_DEPTH, 1497);
    const at = function (depth) {  // the object and depth - 1 arrays inside it
        return '{"a":' + '['.repeat(depth - 1) + ']'.repeat(depth - 1) + '}';
    };
    assert.equal(scan(at(1497)).error, undefined);
    assert.match(scan(at(1498)).error, /deeper than 1497/);
});
