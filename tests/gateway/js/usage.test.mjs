// usage.js on node: a stream's token usage and events, read from its bytes however they are cut
// (components/compile/gateway/usage.js, unmodified; tests/gateway/test_gateway_js.py runs this).
import { test } from 'node:test';
import assert from 'node:assert/strict';

import usage from '../../../components/compile/gateway/usage.js';

function read(text, size) {
    const u = usage.newUsage();
    const bytes = Buffer.from(text);
    for (let i = 0; i < bytes.length; i += size) {
        usage.readUsage(u, bytes.subarray(i, i + size));
    }
    return u;
}

const CHAT = ['data: {"choices":[{"delta":{"content":"Hel"}}]}', 'data: {"choices":[{"delta":{"content":"lo"}}]}',
              'data: {"choices":[],"usage":{"prompt_tokens": 1234,"total_tokens":1290,"completion_tokens":56}}',
              'data: [DONE]'].join('\n\n') + '\n\n';

test('the usage and the events are the same however the stream is cut into buffers', function () {
    for (const size of [1, 2, 3, 5, 7, 13, 64, 65, 200, 4096]) {
        const u = read(CHAT, size);
        assert.deepEqual([u.events, u.prompt, u.completion], [4, 1234, 56], 'buffers of ' + size);
        assert.equal(usage.used(u, 999), 1290);
    }
});

test('Responses usage, the last one seen wins', function () {
    const text = 'event: response.created\ndata: {"response":{"usage":null}}\n\n'
        + 'event: response.completed\ndata: {"response":{"usage":{"input_tokens":7,"output_tokens":5}}}\n\n';
    for (const size of [1, 9, 1000]) {
        const u = read(text, size);
        assert.deepEqual([u.events, u.prompt, u.completion], [2, 7, 5], 'buffers of ' + size);
    }
    const twice = read('data: {"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\ndata: {"usage":{"prompt_tokens":9,"completion_tokens":3}}\n\n', 10);
    assert.equal(usage.used(twice, 0), 12);
});

test('a stream without usage, or cut before it, is charged the estimate and one token an event', function () {
    const cut = CHAT.slice(0, CHAT.indexOf('data: {"choices":[],"usage"'));
    for (const size of [1, 4, 100]) {
        const u = read(cut, size);
        assert.equal(u.events, 2);
        assert.equal(usage.used(u, 30), 32, 'buffers of ' + size);
    }
    assert.equal(usage.used(usage.newUsage(), 30), 30);
});

test('embeddings: the JSON answer\'s usage', function () {
    const u = read('{"object":"list","data":[],"usage":{"prompt_tokens":3,"total_tokens":3}}', 16);
    assert.equal(usage.used(u, 100), 3);
});
