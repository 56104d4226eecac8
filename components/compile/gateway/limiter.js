// The gateway's limiter: one nginx with one worker process holding every tenant's request and
// token buckets in a shared dictionary, asked by each gateway replica (auth_request) before it
// admits a request. One worker runs its handlers one at a time and each handler here is
// synchronous, so a bucket's read-modify-write is never interleaved: the count is exact across
// replicas. Needs njs 0.8 (js_shared_dict_zone).
//
// Buckets are GCRA (the "theoretical arrival time" form of a token bucket): per bucket one number,
// the time (ms) at which it is full again. Requests: each costs `requestIntervalMs`, and up to
// `requestToleranceMs` (burst x interval) of future time may be owed. Tokens: a request is
// admitted while the bucket is not empty; its usage (known only when it ends) is charged by the
// replica's next check or its periodic flush, and may overdraw the bucket, which then refills.

import cfg from 'limiter_config.js';

function limitsOf(name) {
    return name && Object.prototype.hasOwnProperty.call(cfg.tenants, name) ? cfg.tenants[name] : null;
}

function retrySeconds(waitMs) {
    return String(Math.max(1, Math.ceil(waitMs / 1000)));
}

function tokensOf(value) {
    const n = parseInt(value || '0', 10);
    return n > 0 ? n : 0;
}

function charge(dict, name, limits, tokens, now) {
    if (!limits.tokenIntervalMs || tokens <= 0) {
        return;
    }
    const key = 't:' + name;
    dict.set(key, Math.max(dict.get(key) || 0, now) + tokens * limits.tokenIntervalMs);
}

function refuse(r, kind, waitMs) {
    r.headersOut['Retry-After'] = retrySeconds(waitMs);
    r.headersOut[cfg.headers.limit] = kind;
    r.return(403);
}

// GET /check (headers: the tenant, and usage to charge first): 204 admitted, 403 limited (with
// the limit that refused).
function check(r) {
    const name = r.headersIn[cfg.headers.tenant] || '';
    const limits = limitsOf(name);
    if (!limits) {
        r.return(204);
        return;
    }
    const dict = ngx.shared.gw_limits;
    const now = Date.now();
    charge(dict, name, limits, tokensOf(r.headersIn[cfg.headers.tokens]), now);
    // Both limits are asked before either refuses, and Retry-After is the later of the two times
    // at which each admits the request again: told only one, a client retrying then would be
    // refused by the other.
    let tokensWait = 0;
    if (limits.tokenIntervalMs) {
        // Empty (or overdrawn): admitted again once it has refilled above zero.
        const owed = Math.max(dict.get('t:' + name) || 0, now) - limits.tokenToleranceMs - now;
        tokensWait = owed >= 0 ? owed + 1 : 0;
    }
    let requestsWait = 0;
    let due = 0;
    if (limits.requestIntervalMs) {
        due = Math.max(dict.get('r:' + name) || 0, now);
        requestsWait = Math.max(0, due - limits.requestToleranceMs - now);
    }
    if (tokensWait > 0 || requestsWait > 0) {
        refuse(r, tokensWait >= requestsWait ? 'tokens' : 'requests', Math.max(tokensWait, requestsWait));
        return;
    }
    if (limits.requestIntervalMs) {
        dict.set('r:' + name, due + limits.requestIntervalMs);
    }
    r.return(204);
}

// POST /charge (headers: the tenant, the tokens): a replica's usage not yet carried by a check.
function chargeOnly(r) {
    const name = r.headersIn[cfg.headers.tenant] || '';
    const limits = limitsOf(name);
    if (limits) {
        charge(ngx.shared.gw_limits, name, limits, tokensOf(r.headersIn[cfg.headers.tokens]), Date.now());
    }
    r.return(204);
}

export default {check, chargeOnly};
