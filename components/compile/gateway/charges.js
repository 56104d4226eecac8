// Token limits: the usage read from answers (a stream's by its body filter, usage.js; a folded
// answer's from the answer), charged to this replica's pending tokens per tenant in the log phase
// (or by the fold server), and carried to the limiter by the tenant's next check ($gw_charge) or
// the periodic flush. tests/gateway/js runs this on node with fake shared dictionaries.

import cfg from 'gateway_config.js';
import tenants from 'tenants.js';
import usage from 'usage.js';

// A stream's usage, read by its body filter (usage.js), per request: keyed by nginx's
// $request_id, made at the first buffer and dropped in the log phase, where it is charged.
const streams = Object.create(null);

// The folded answer's usage (chat: usage.prompt_tokens / completion_tokens; Responses:
// usage.input_tokens / output_tokens), read once at the end instead of scanning every buffer
// of the stream: each scan's text stays allocated until the request ends on njs's legacy engine.
function foldUsage(r, st, answer) {
    const u = answer && answer.usage;
    if (u) {
        const prompt = u.prompt_tokens !== undefined ? u.prompt_tokens : u.input_tokens;
        const completion = u.completion_tokens !== undefined ? u.completion_tokens : u.output_tokens;
        if (typeof prompt === 'number') {
            r.variables.gw_prompt_used = String(prompt);
        }
        if (typeof completion === 'number') {
            r.variables.gw_completion_used = String(completion);
        }
    }
    r.variables.gw_events_seen = String(st.events);
    // The tenant as the front server resolved it (this subrequest has no key to resolve).
    charge(r, r.headersIn[cfg.foldHeaders.tenant] || '', promptEstimate(r));
}

// The fold server's x-input-tokens, as the front sent it.
function promptEstimate(r) {
    return Number(r.headersIn[cfg.routerHeaders.input_tokens]) || 0;
}

// A token-limited tenant's usage of this answer, added to what the limiter is owed: the engine's
// usage when the stream carried it, else the prompt's estimate and one token per event streamed
// (a stream without usage, or one that ended early: its client left, or the answer was too
// large). Charged once, when the request ends.
function charge(r, tenantName, estimate) {
    let used;
    if (r.variables.gw_prompt_used || r.variables.gw_completion_used) {
        used = Number(r.variables.gw_prompt_used || 0) + Number(r.variables.gw_completion_used || 0);
    } else {
        used = estimate + Number(r.variables.gw_events_seen || 0);
    }
    chargeTokens(tenantName, used);
}

function chargeTokens(tenantName, used) {
    const t = tenants.tenantConfig(tenantName);
    if (t && t.tokenLimited && ngx.shared.gw_pending && used > 0) {
        ngx.shared.gw_pending.incr(tenantName, used, 0);
    }
}

// js_body_filter of @gw_stream (streams and embeddings): bytes pass unchanged, usage is read.
// The charge is made in the log phase (observe), which every request reaches, a stream whose
// client left before its end too (no last buffer ever comes then).
//
// njs keeps every buffer a body filter is given (and what the filter allocates) until the request
// ends: a stream read to its end would cost about three times its bytes for its whole life. So
// only its first cfg.streamReadBytes are read; then the filter steps aside (r.done(): nginx
// passes the rest without calling it) and the events past that point are estimated in the log
// phase from the bytes sent ($body_bytes_sent) at the rate of those read. A stream that long
// is then charged that estimate, its usage chunk (at the end) unread.
function countStream(r, data, flags) {
    let u;
    if (r.status === 200) {
        u = streams[r.variables.request_id] || (streams[r.variables.request_id] = usage.newUsage());
        usage.readUsage(u, data);
        u.bytes = (u.bytes || 0) + data.length;
    }
    r.sendBuffer(data, flags);
    if (u && u.bytes >= cfg.streamReadBytes && !flags.last) {
        u.cut = true;
        r.done();
    }
}

// Log phase of a streaming call or embeddings the router answered (its last status 200, after
// any hold): charged what was streamed, and its usage kept for the metrics. Folded calls are
// charged by the fold server.
function chargeStream(r) {
    const id = r.variables.request_id;
    const u = streams[id];
    if (!u) {
        return;
    }
    delete streams[id];
    if (u.prompt >= 0) {
        r.variables.gw_prompt_used = String(u.prompt);
    }
    if (u.completion >= 0) {
        r.variables.gw_completion_used = String(u.completion);
    }
    if (u.cut) {
        // The events past the part read, at the rate of the part read.
        const sent = Number(r.variables.body_bytes_sent) || u.bytes;
        u.events = Math.ceil(u.events * Math.max(sent, u.bytes) / u.bytes);
        u.prompt = -1;
        u.completion = -1;
    }
    if (!r.variables.gw_kind && /(?:^|\s)200$/.test(r.variables.upstream_status || '')) {
        chargeTokens(r.variables.gw_tenant, usage.used(u, Number(r.variables.gw_input_tokens) || 0));
    }
}

// js_set $gw_charge, read by the limit check: this tenant's usage not yet charged, taken (an
// atomic decrement, so usage added meanwhile by another worker stays for the next check).
function takeCharge(r) {
    const tenantName = r.variables.gw_tenant;
    const pending = ngx.shared.gw_pending;
    if (!tenantName || !pending) {
        return '0';
    }
    const owed = pending.get(tenantName) || 0;
    if (owed > 0) {
        pending.incr(tenantName, -owed, 0);
    }
    return String(owed);
}

// The limiter's header names come from the settings (limiter.py, LIMITER_HEADERS).
function chargeHeaders(tenantName, owed) {
    const headers = {};
    headers[cfg.limiterHeaders.tenant] = tenantName;
    headers[cfg.limiterHeaders.tokens] = String(owed);
    return headers;
}

// js_periodic (every second): usage of tenants that sent no further request from this replica
// goes to the limiter through the loopback server (nginx.conf, /_gw/charge).
async function flushCharges() {
    const pending = ngx.shared.gw_pending;
    if (!pending) {
        return;
    }
    const names = pending.keys();
    for (let i = 0; i < names.length; i++) {
        const owed = pending.get(names[i]) || 0;
        if (owed <= 0) {
            continue;
        }
        pending.incr(names[i], -owed, 0);
        try {
            await ngx.fetch('http://' + cfg.internalListen + '/_gw/charge', {
                method: 'POST', headers: chargeHeaders(names[i], owed)});
        } catch (e) {
            ngx.log(ngx.WARN, 'gateway: the limiter did not take ' + owed + ' tokens of ' + names[i] + ': ' + e.message);
        }
    }
}

export default {countStream, chargeStream, foldUsage, promptEstimate, charge, chargeTokens, takeCharge, flushCharges};
