// The request body, read for what routing needs and nothing else (issue 39: one admitted body made
// of many small JSON values grew nginx by ~32 x its size, since njs frees nothing a request
// allocates before the request ends, and JSON.parse allocates an object per value).
//
// One pass over the body's bytes, read from nginx's temp file through one reused buffer: the JSON
// is checked (grammar, UTF-8, nesting up to JSON_MAX_DEPTH) and these are taken from it — the
// top-level `model` (decoded: at most MODEL_MAX_BYTES), `stream`, where the members the fold
// replaces lie, the bytes of text the token estimate counts, the number of messages or input
// items, and a hash of the leading messages for the affinity key. No value is decoded but the
// model and small keys; strings are skipped with Buffer.indexOf (native), so what a body costs
// is one buffer and the UTF-8 check's decoded text (about its size), whatever its shape.
//
// Pure: no nginx objects (the caller passes a reader); tests/gateway/js runs it on node.

import crypto from 'crypto';

// vLLM decodes a request with Python's json (FastAPI's request.json()), whose C scanner stops at
// the interpreter's C recursion limit: 1,497 nested containers on Python 3.12 (vLLM's images),
// 994 on 3.11 (measured 2026-12-07). The gateway accepts what 3.12 does; njs's JSON.parse stops
// at 32.
const JSON_MAX_DEPTH = 1497;
const MODEL_MAX_BYTES = 1024;
// Longest key that can decode to a member this reads ("stream_options" escaped as \uXXXX: 84).
const KEY_MAX_BYTES = 96;
const CHUNK_BYTES = 65536;

// What the text estimate counts below a counted member (as the chat template renders them):
// message contents, tool-call arguments and names, Responses input and instructions.
const TEXT_KEYS = ['text', 'content', 'arguments', 'input', 'output', 'instructions', 'name', 'function',
                   'tool_calls', 'refusal', 'summary'].map(function (k) { return Buffer.from(k); });

// Top-level members read.
const MODEL = 1;
const STREAM = 2;
const STREAM_OPTIONS = 3;
const MESSAGES = 4;
const INPUT = 5;
const INSTRUCTIONS = 6;
const OTHER = 7;
const MEMBER_NAMES = [null, 'model', 'stream', 'stream_options', 'messages', 'input', 'instructions'];
const MEMBER_KEYS = MEMBER_NAMES.map(function (k) { return k === null ? null : Buffer.from(k); });
const INCLUDE_USAGE = Buffer.from('include_usage');
const ROLE = Buffer.from('role');
const USER = Buffer.from('user');

// What comes next.
const VALUE = 0;
const VALUE_OR_CLOSE = 1;
const KEY = 2;
const KEY_OR_CLOSE = 3;
const COLON = 4;
const COMMA_OR_CLOSE = 5;
const DONE = 6;

const OBJ = 1;
const ARR = 2;

// Number grammar states.
const N_SIGN = 1;
const N_ZERO = 2;
const N_INT = 3;
const N_DOT = 4;
const N_FRAC = 5;
const N_E = 6;
const N_ESIGN = 7;
const N_EXP = 8;

const LITERALS = {116: Buffer.from('true'), 102: Buffer.from('false'), 110: Buffer.from('null')};

function newScan(kind, maxLeading) {
    return {
        kind: kind, maxLeading: maxLeading || 4,
        depth: 0, expect: VALUE, base: 0,
        kinds: new Uint8Array(JSON_MAX_DEPTH + 2), counted: new Uint8Array(JSON_MAX_DEPTH + 2),
        // The string being read.
        inString: false, isKey: false, esc: 0, strStart: 0, strEsc: false, cap: Buffer.alloc(MODEL_MAX_BYTES),
        capLen: 0, capMax: 0, q: -2, bs: -2,
        // The number or literal being read.
        num: 0, lit: null, litPos: 0,
        decoder: new TextDecoder('utf-8', {fatal: true}),
        // Inside a member nothing is read from (skipBytes).
        skipping: false, skipBase: 0,
        // Top-level members.
        member: 0, seen: 0, lastComma: -1, open: -1, close: -1, keyStart: -1, keyComma: -1, first: 0,
        ranges: {}, model: null, modelTooLong: false, stream: undefined,
        // The key just read in an object at depth 2 (stream_options' members, a message's role).
        key2: 0, usageRange: null, soComma: -1, soOpen: -1, soClose: -1,
        // Estimate.
        textBytes: 0, items: 0, itemsArray: false, ids: 0, idsOnly: true, isUser: false,
        // Affinity: the member's leading bytes hashed as they pass.
        hash: null, hashFrom: -1, digests: {},
    };
}

function fail(message) {
    const e = new Error(message);
    e.bodyError = true;
    throw e;
}

function keyIs(sc, key) {
    if (sc.capLen !== key.length || sc.capMax < 0) {
        return false;
    }
    for (let i = 0; i < key.length; i++) {
        if (sc.cap[i] !== key[i]) {
            return false;
        }
    }
    return true;
}

// The key just read, decoded when it has escapes (a member hidden as "mod\u0065l" is still the
// model: vLLM's json decodes it).
function decodedKey(sc) {
    if (sc.capMax < 0) {
        return null;
    }
    if (!sc.strEsc) {
        return sc;
    }
    const bytes = Buffer.from(decoded(sc));
    bytes.copy(sc.cap, 0);
    sc.capLen = bytes.length;
    return sc;
}

// The captured string's text (JSON escapes decoded).
function decoded(sc) {
    try {
        return JSON.parse('"' + sc.cap.toString('utf8', 0, sc.capLen) + '"');
    } catch (e) {
        return fail('a string with a control character at byte ' + sc.strStart);
    }
}

function memberOf(sc) {
    if (!decodedKey(sc)) {
        return OTHER;
    }
    for (let m = MODEL; m < OTHER; m++) {
        if (keyIs(sc, MEMBER_KEYS[m])) {
            return m;
        }
    }
    return OTHER;
}

function textKey(sc) {
    if (!decodedKey(sc)) {
        return false;
    }
    for (let i = 0; i < TEXT_KEYS.length; i++) {
        if (keyIs(sc, TEXT_KEYS[i])) {
            return true;
        }
    }
    return false;
}

// Which top-level members hold what the estimate counts and the affinity key hashes.
function countedMember(kind, member) {
    if (kind === 'chat') {
        return member === MESSAGES;
    }
    return member === INPUT || (kind === 'responses' && member === INSTRUCTIONS);
}

// Hashing: the bytes from hashFrom (absolute) on, up to where stopHash is called.
function startHash(sc, at) {
    sc.hash = crypto.createHash('sha256');
    sc.hashFrom = at;
}

function stopHash(sc, buf, at, name) {
    if (!sc.hash) {
        return;
    }
    if (at > sc.hashFrom) {
        sc.hash.update(buf.subarray(sc.hashFrom - sc.base, at - sc.base));
    }
    sc.digests[name] = sc.hash.digest('hex');
    sc.hash = null;
}

// A value starts at absolute offset `at` (its first byte `c`), at depth sc.depth.
function startValue(sc, at, c) {
    // No let or const inside a block here or in anything called per byte or per value: njs
    // allocates a scope for each pass through such a block, kept until the request ends.
    const d = sc.depth;
    const m = sc.member;
    let number;
    if (d === 1) {
        sc.first = c;
        if (m === MESSAGES || (m === INPUT && sc.kind !== 'embeddings')) {
            sc.itemsArray = c === 91;
            startHash(sc, at);
        } else if (m === INSTRUCTIONS || (m === INPUT && c !== 91)) {
            startHash(sc, at);
        }
        if (m === INPUT && sc.kind === 'embeddings' && c !== 91) {
            sc.idsOnly = false;
        }
        if (m === MODEL && c === 34) {
            sc.capMax = MODEL_MAX_BYTES;
        }
    } else if (sc.member === INPUT && sc.kind === 'embeddings') {
        if (d === 2 && !sc.hash && !sc.digests.input) {
            startHash(sc, at);  // keyed by the first input, alone or in a list
        }
        number = c === 45 || (c >= 48 && c <= 57);
        if (number && d <= 3) {
            sc.ids++;
        } else if (!(d === 2 && c === 91)) {
            sc.idsOnly = false;
        }
    }
    if (d === 2 && sc.itemsArray && (sc.member === MESSAGES || sc.member === INPUT)) {
        sc.items++;
        sc.isUser = false;
    }
    if (d === 3 && sc.key2 === 1 && c === 34) {
        sc.capMax = USER.length;  // a message's role: is it "user"?
    }
}

// A value ended at absolute offset `at` (exclusive); it was at depth sc.depth. `buf` is the chunk
// it ended in.
function endValue(sc, buf, at, wasString) {
    const d = sc.depth;
    const m = sc.member;
    const c = sc.first;
    sc.expect = d === 0 ? DONE : COMMA_OR_CLOSE;
    if (wasString && sc.counted[d] && !sc.isKey) {
        sc.textBytes += at - sc.strStart - 2;
    }
    if (d === 1) {
        if (m === STREAM || m === STREAM_OPTIONS) {
            sc.ranges[m] = {start: sc.keyStart, comma: sc.keyComma, end: at};
        }
        if (m === MODEL) {
            if (wasString && sc.capMax >= 0) {
                sc.model = decoded(sc);
            } else if (wasString) {
                sc.modelTooLong = true;
            } else {
                sc.model = null;
            }
        } else if (m === STREAM) {
            sc.stream = c === 116 ? true : (c === 102 ? false : (c === 110 ? null : 'invalid'));
        } else if (m === INSTRUCTIONS || m === INPUT || m === MESSAGES) {
            stopHash(sc, buf, at, MEMBER_NAMES[m]);
        }
        sc.capMax = 0;
        return;
    }
    if (d === 2 && sc.member === STREAM_OPTIONS && sc.key2 === 2) {
        sc.usageRange.end = at;
        sc.key2 = 0;
    }
    if (d === 2 && sc.hash) {
        if (sc.member === INPUT && sc.kind === 'embeddings') {
            stopHash(sc, buf, at, 'input');  // embeddings: keyed by the first input
        } else if (sc.itemsArray && (sc.isUser || sc.items >= sc.maxLeading)) {
            // The leading messages: up to and including the first user message, at most maxLeading.
            stopHash(sc, buf, at, MEMBER_NAMES[sc.member]);
        }
    } else if (d === 3 && sc.key2 === 1 && wasString) {
        sc.isUser = sc.capMax >= 0 && keyIs(sc, USER);
        sc.capMax = 0;
    }
}

function keyDone(sc, at) {
    const d = sc.depth;  // the object's depth + 1: the depth of the member's value
    let m;
    if (d === 1) {
        m = memberOf(sc);
        if (m !== OTHER) {
            if (sc.seen & (1 << m)) {
                fail('the member `' + MEMBER_NAMES[m] + '` is given twice');
            }
            sc.seen |= 1 << m;
        }
        sc.member = m;
        sc.keyStart = sc.strStart;
        sc.keyComma = sc.lastComma;
        sc.counted[1] = countedMember(sc.kind, m) ? 1 : 0;
    } else {
        sc.counted[d] = sc.counted[d - 1] && textKey(sc) ? 1 : 0;
        if (d === 2 && sc.member === STREAM_OPTIONS) {
            if (keyIs(sc, INCLUDE_USAGE)) {
                if (sc.usageRange) {
                    fail('the member `stream_options.include_usage` is given twice');
                }
                sc.usageRange = {start: sc.strStart, comma: sc.soComma, end: -1};
                sc.key2 = 2;
            } else {
                sc.key2 = 0;
            }
        } else if (d === 3) {
            sc.key2 = keyIs(sc, ROLE) ? 1 : 0;
        }
    }
    sc.expect = COLON;
    sc.capMax = 0;
}

// Inside a string: skips to its end (or the chunk's), returns the next index.
function readString(sc, buf, i, len) {
    let c;
    let q;
    let bs;
    while (i < len) {
        if (sc.esc) {
            c = buf[i];
            if (sc.esc === 1) {
                if (c === 117) {
                    sc.esc = 2;
                } else if (c === 34 || c === 92 || c === 47 || c === 98 || c === 102 || c === 110 || c === 114
                           || c === 116) {
                    sc.esc = 0;
                } else {
                    fail('an invalid escape in a string at byte ' + (sc.base + i));
                }
            } else {
                if (!((c >= 48 && c <= 57) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102))) {
                    fail('an invalid \\u escape at byte ' + (sc.base + i));
                }
                sc.esc = sc.esc === 5 ? 0 : sc.esc + 1;
            }
            capture(sc, buf, i, i + 1);
            i++;
            continue;
        }
        if (sc.q !== -1 && sc.q < i) {
            sc.q = buf.indexOf(34, i);
            if (sc.q >= len) {
                sc.q = -1;
            }
        }
        if (sc.bs !== -1 && sc.bs < i) {
            sc.bs = buf.indexOf(92, i);
            if (sc.bs >= len) {
                sc.bs = -1;
            }
        }
        q = sc.q;
        bs = sc.bs;
        if (bs !== -1 && (q === -1 || bs < q)) {
            capture(sc, buf, i, bs + 1);
            sc.strEsc = true;
            sc.esc = 1;
            i = bs + 1;
            continue;
        }
        if (q === -1) {
            capture(sc, buf, i, len);
            return len;
        }
        capture(sc, buf, i, q);
        sc.inString = false;
        if (sc.skipping) {
            return q + 1;
        }
        if (sc.isKey) {
            keyDone(sc, sc.base + q + 1);
            sc.isKey = false;
        } else {
            endValue(sc, buf, sc.base + q + 1, true);
        }
        return q + 1;
    }
    return i;
}

function capture(sc, buf, from, to) {
    if (sc.capMax <= 0 || to <= from) {
        return;
    }
    if (sc.capLen + (to - from) > sc.capMax) {
        sc.capMax = -1;  // too long to be what is looked for
        return;
    }
    buf.copy(sc.cap, sc.capLen, from, to);
    sc.capLen += to - from;
}

function open(sc, at, kind) {
    if (sc.depth >= JSON_MAX_DEPTH) {
        fail('it is nested deeper than ' + JSON_MAX_DEPTH + ' levels');
    }
    sc.depth++;
    sc.kinds[sc.depth] = kind;
    if (kind === ARR) {
        sc.counted[sc.depth] = sc.counted[sc.depth - 1];
    }
    if (sc.depth === 1) {
        sc.open = kind === OBJ ? at : -1;
    } else if (sc.depth === 2 && sc.member === STREAM_OPTIONS) {
        sc.soOpen = kind === OBJ ? at : -1;
    }
    sc.expect = kind === OBJ ? KEY_OR_CLOSE : VALUE_OR_CLOSE;
}

function close(sc, buf, i, kind) {
    if (sc.kinds[sc.depth] !== kind) {
        fail('a misplaced ' + (kind === OBJ ? '}' : ']') + ' at byte ' + (sc.base + i));
    }
    if (sc.depth === 1) {
        sc.close = sc.base + i;
    } else if (sc.depth === 2 && sc.member === STREAM_OPTIONS && sc.soOpen >= 0) {
        sc.soClose = sc.base + i;
    }
    sc.depth--;
    endValue(sc, buf, sc.base + i + 1, false);
}

function endNumber(sc, buf, at) {
    if (sc.num === N_SIGN || sc.num === N_DOT || sc.num === N_E || sc.num === N_ESIGN) {
        fail('an incomplete number at byte ' + at);
    }
    sc.num = 0;
    endValue(sc, buf, at, false);
}

// Number bytes; returns false at the first byte that is not the number's (not consumed).
function numberByte(sc, c) {
    const digit = c >= 48 && c <= 57;
    switch (sc.num) {
    case N_SIGN:
        if (!digit) {
            return fail('a sign without digits');
        }
        sc.num = c === 48 ? N_ZERO : N_INT;
        return true;
    case N_ZERO:
    case N_INT:
        if (digit && sc.num === N_INT) {
            return true;
        }
        if (digit) {
            return fail('a number with a leading zero');
        }
        if (c === 46) {
            sc.num = N_DOT;
            return true;
        }
        if (c === 101 || c === 69) {
            sc.num = N_E;
            return true;
        }
        return false;
    case N_DOT:
        if (!digit) {
            return fail('a decimal point without digits');
        }
        sc.num = N_FRAC;
        return true;
    case N_FRAC:
        if (digit) {
            return true;
        }
        if (c === 101 || c === 69) {
            sc.num = N_E;
            return true;
        }
        return false;
    case N_E:
        if (c === 43 || c === 45) {
            sc.num = N_ESIGN;
            return true;
        }
        if (!digit) {
            return fail('an exponent without digits');
        }
        sc.num = N_EXP;
        return true;
    case N_ESIGN:
        if (!digit) {
            return fail('an exponent without digits');
        }
        sc.num = N_EXP;
        return true;
    default:
        return digit;
    }
}

function expectValue(sc, i) {
    if (sc.expect !== VALUE && sc.expect !== VALUE_OR_CLOSE) {
        fail('a value where ' + (sc.expect === DONE ? 'the body should end' : 'a key, a comma or a bracket belongs')
             + ' at byte ' + (sc.base + i));
    }
}

// Whether nothing is read from the value of the top-level member being read (a container): it
// is then only skipped, its brackets matched and counted against the depth, its strings
// skipped natively (skipBytes): tools, schemas, metadata... The engine checks the rest of its
// grammar, as it does for everything it reads.
function skipped(kind, member) {
    if (member === OTHER || member === MODEL || member === STREAM) {
        return true;
    }
    if (member === STREAM_OPTIONS) {
        return kind !== 'chat';
    }
    if (member === INSTRUCTIONS) {
        return kind !== 'responses';
    }
    return member === MESSAGES ? kind !== 'chat' : kind === 'chat';
}

// Inside a skipped container: brackets and strings only, a few comparisons a byte, in locals
// (njs reads a local much faster than a property). A string that ends in this buffer is
// skipped here with indexOf; one that goes on into the next is left to readString.
function skipBytes(sc, buf, i, len) {
    const kinds = sc.kinds;
    const base = sc.skipBase;
    let depth = sc.depth;
    let c;
    let q;
    let k;
    while (i < len) {
        c = buf[i];
        if (c === 34) {
            q = buf.indexOf(34, i + 1);
            // A quote after an odd run of backslashes is escaped.
            while (q !== -1 && q < len && buf[q - 1] === 92) {
                k = q - 1;
                while (k > i && buf[k] === 92) {
                    k--;
                }
                if ((q - 1 - k) % 2 === 0) {
                    break;
                }
                q = buf.indexOf(34, q + 1);
            }
            if (q === -1 || q >= len) {
                sc.depth = depth;
                sc.inString = true;
                sc.strStart = sc.base + i;
                sc.capMax = 0;
                return i + 1;
            }
            i = q + 1;
            continue;
        }
        if (c === 123 || c === 91) {
            if (depth >= JSON_MAX_DEPTH) {
                fail('it is nested deeper than ' + JSON_MAX_DEPTH + ' levels');
            }
            depth++;
            kinds[depth] = c === 123 ? OBJ : ARR;
        } else if (c === 125 || c === 93) {
            if (kinds[depth] !== (c === 125 ? OBJ : ARR)) {
                fail('a misplaced ' + (c === 125 ? '}' : ']') + ' at byte ' + (sc.base + i));
            }
            depth--;
            if (depth === base) {
                sc.depth = depth;
                sc.skipping = false;
                endValue(sc, buf, sc.base + i + 1, false);
                return i + 1;
            }
        }
        i++;
    }
    sc.depth = depth;
    return i;
}

// Reads `len` bytes of `buf`, the body's bytes from offset sc.base.
function feed(sc, buf, len) {
    try {
        sc.decoder.decode(buf.subarray(0, len), {stream: true});
    } catch (e) {
        fail('it is not valid UTF-8');
    }
    sc.q = -2;
    sc.bs = -2;
    let i = 0;
    let c;
    let at;
    while (i < len) {
        if (sc.inString) {
            i = readString(sc, buf, i, len);
            continue;
        }
        if (sc.skipping) {
            i = skipBytes(sc, buf, i, len);
            continue;
        }
        c = buf[i];
        if (sc.num) {
            if (numberByte(sc, c)) {
                i++;
                continue;
            }
            endNumber(sc, buf, sc.base + i);
        }
        if (sc.lit) {
            if (c !== sc.lit[sc.litPos]) {
                fail('an invalid literal at byte ' + (sc.base + i));
            }
            sc.litPos++;
            i++;
            if (sc.litPos === sc.lit.length) {
                sc.lit = null;
                endValue(sc, buf, sc.base + i, false);
            }
            continue;
        }
        if (c === 32 || c === 10 || c === 13 || c === 9) {
            i++;
            continue;
        }
        at = sc.base + i;
        if (c === 34) {
            sc.inString = true;
            sc.strStart = at;
            sc.strEsc = false;
            sc.capLen = 0;
            if (sc.expect === KEY || sc.expect === KEY_OR_CLOSE) {
                sc.isKey = true;
                sc.capMax = KEY_MAX_BYTES;
            } else {
                expectValue(sc, i);
                sc.capMax = 0;
                startValue(sc, at, c);
            }
            i++;
            continue;
        }
        if (c === 123 || c === 91) {
            expectValue(sc, i);
            startValue(sc, at, c);
            // A container nothing is read from is skipped: a top-level member's the gateway does not
            // read, and below a message or input item whatever the estimate does not count.
            sc.skipping = sc.depth === 1 ? skipped(sc.kind, sc.member) : (sc.depth >= 3 && !sc.counted[sc.depth]);
            sc.skipBase = sc.depth;
            open(sc, at, c === 123 ? OBJ : ARR);
        } else if (c === 125) {
            if (sc.expect !== KEY_OR_CLOSE && sc.expect !== COMMA_OR_CLOSE) {
                fail('a misplaced } at byte ' + at);
            }
            close(sc, buf, i, OBJ);
        } else if (c === 93) {
            if (sc.expect !== VALUE_OR_CLOSE && sc.expect !== COMMA_OR_CLOSE) {
                fail('a misplaced ] at byte ' + at);
            }
            close(sc, buf, i, ARR);
        } else if (c === 58) {
            if (sc.expect !== COLON) {
                fail('a misplaced : at byte ' + at);
            }
            sc.expect = VALUE;
        } else if (c === 44) {
            if (sc.expect !== COMMA_OR_CLOSE) {
                fail('a misplaced , at byte ' + at);
            }
            sc.expect = sc.kinds[sc.depth] === OBJ ? KEY : VALUE;
            if (sc.depth === 1) {
                sc.lastComma = at;
            } else if (sc.depth === 2 && sc.member === STREAM_OPTIONS) {
                sc.soComma = at;
            }
        } else if (c === 45 || (c >= 48 && c <= 57)) {
            expectValue(sc, i);
            startValue(sc, at, c);
            sc.num = c === 45 ? N_SIGN : (c === 48 ? N_ZERO : N_INT);
        } else if (LITERALS[c]) {
            expectValue(sc, i);
            startValue(sc, at, c);
            sc.lit = LITERALS[c];
            sc.litPos = 1;
        } else {
            fail('an unexpected byte at ' + at);
        }
        i++;
    }
    if (sc.hash && sc.hashFrom < sc.base + len) {
        sc.hash.update(buf.subarray(sc.hashFrom - sc.base, len));
        sc.hashFrom = sc.base + len;
    }
    sc.base += len;
}

function end(sc) {
    if (sc.num && sc.depth === 0) {
        endNumber(sc, null, sc.base);
    }
    try {
        sc.decoder.decode();
    } catch (e) {
        fail('it is not valid UTF-8');
    }
    if (sc.inString || sc.lit || sc.expect !== DONE) {
        fail(sc.base === 0 ? 'it is empty' : 'it ends before the JSON value does');
    }
    if (sc.open < 0) {
        fail('it is not a JSON object');
    }
}

// Reads the body through `read(buffer)` (returns the bytes it put at the buffer's start, 0 at the
// end). Returns what routing needs, or {error} with the reason the body is refused. `size`: the
// body's length when known (the buffer is no larger).
function scanBody(read, kind, maxLeading, size) {
    const scan = startScan(kind, maxLeading, size);
    let n;
    for (;;) {
        n = read(scan.buf);
        if (!n || !scanChunk(scan, n)) {
            break;
        }
    }
    return endScan(scan);
}

// The same in steps, for a caller that reads the body itself and may pause between reads
// (gateway.js: a large body made of small values is read in slices, so other requests of the
// worker are served between them): startScan, then scanChunk(scan, n) for the n bytes read into
// scan.buf (false once the body is refused), then endScan for the result.
function startScan(kind, maxLeading, size) {
    return {sc: newScan(kind, maxLeading), buf: Buffer.alloc(size > 0 ? Math.min(size + 1, CHUNK_BYTES) : CHUNK_BYTES),
            error: null};
}

function scanChunk(scan, n) {
    try {
        feed(scan.sc, scan.buf, n);
        return true;
    } catch (e) {
        if (e.bodyError) {
            scan.error = e.message;
            return false;
        }
        throw e;
    }
}

function endScan(scan) {
    const sc = scan.sc;
    if (!scan.error) {
        try {
            end(sc);
        } catch (e) {
            if (!e.bodyError) {
                throw e;
            }
            scan.error = e.message;
        }
    }
    if (scan.error) {
        return {error: scan.error};
    }
    const kind = sc.kind;
    const ids = kind === 'embeddings' && sc.idsOnly && sc.ids > 0 ? sc.ids : -1;
    const items = sc.itemsArray ? sc.items : 1;
    let tokens;
    if (ids >= 0) {
        tokens = ids;
    } else if (kind === 'embeddings') {
        tokens = Math.ceil(sc.textBytes / 4);
    } else {
        tokens = Math.ceil(sc.textBytes / 4) + 4 * (kind === 'chat' ? sc.items : items);
    }
    return {
        model: sc.model, modelTooLong: sc.modelTooLong, stream: sc.stream, inputTokens: tokens,
        // The leading messages' (or first input's) hashes, for the affinity key.
        prefix: [sc.digests.messages || null, sc.digests.instructions || null, sc.digests.input || null],
        // Where the object and the members the fold replaces lie (byte offsets).
        open: sc.open, close: sc.close, stream_: sc.ranges[STREAM] || null,
        streamOptions: sc.ranges[STREAM_OPTIONS] || null, soOpen: sc.soOpen, soClose: sc.soClose,
        includeUsage: sc.usageRange && sc.usageRange.end >= 0 ? sc.usageRange : null,
    };
}

// A reader over bytes in memory (the tests', and a body nginx kept in memory).
function bufferReader(bytes) {
    // (scanBody's size: bytes.length.)
    let at = 0;
    return function (buf) {
        const n = Math.min(buf.length, bytes.length - at);
        bytes.copy(buf, 0, at, at + n);
        at += n;
        return n;
    };
}

// The body with the members in `drop` ({start, comma, end} byte ranges: a member from its key to
// its value's end, and the comma before it, -1 for the first) left out of the object spanning
// [open, close], and the `add` text ("name":value members) first. Everything else is the
// client's bytes, unchanged.
function splice(bytes, open, close, drop, add) {
    const cuts = drop.filter(Boolean).map(function (m) {
        return m.comma >= 0 ? [m.comma, m.end] : [m.start, m.end];
    }).sort(function (a, b) { return a[0] - b[0]; });
    const parts = [Buffer.from('{' + add)];
    let at = open + 1;
    let rest = [];
    for (let i = 0; i < cuts.length; i++) {
        rest.push(bytes.subarray(at, cuts[i][0]));
        at = cuts[i][1];
    }
    rest.push(bytes.subarray(at, close));
    rest = Buffer.concat(rest);
    // The first kept member lost its comma (the first member has none): one goes before it.
    let first = 0;
    while (first < rest.length && (rest[first] === 32 || rest[first] === 10 || rest[first] === 13 || rest[first] === 9)) {
        first++;
    }
    if (first < rest.length && rest[first] !== 44 && add) {
        parts.push(Buffer.from(','));
    } else if (first < rest.length && rest[first] === 44 && !add) {
        rest = rest.subarray(first + 1);
    }
    parts.push(rest, Buffer.from('}'));
    return Buffer.concat(parts);
}

// The fold's body: the client's with `"stream": true` and, for chat, stream_options with
// include_usage true (the client's other stream options kept), in place of its own.
function streamBody(bytes, scan, kind) {
    let add = '"stream":true';
    if (kind === 'chat') {
        let options = '{"include_usage":true}';
        if (scan.streamOptions && scan.soOpen >= 0 && scan.soClose > scan.soOpen) {
            const inner = splice(bytes, scan.soOpen, scan.soClose, [scan.includeUsage], '"include_usage":true');
            options = inner.toString();
        }
        add += ',"stream_options":' + options;
    }
    return splice(bytes, scan.open, scan.close, [scan.stream_, kind === 'chat' ? scan.streamOptions : null], add);
}

export default {JSON_MAX_DEPTH, scanBody, startScan, scanChunk, endScan, bufferReader, streamBody, splice};
