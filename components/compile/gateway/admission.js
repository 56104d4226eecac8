// What one gateway replica holds at once (router.gateway.inFlight): every request an API location
// serves takes, before its key is checked or its body read, one of the replica's
// cfg.inFlight.requests and its declared body bytes (Content-Length; a body without one, chunked,
// counts maxBodyBytes) of cfg.inFlight.bodyBytes, and a non-streaming call, once its body is read
// and before it is folded, one of cfg.inFlight.folds. Each tenant has its share of each (the
// budget over the tenants, nginx.py): one tenant at its share leaves every other its own.
// Released in the log phase, which every request reaches. This is what bounds a replica's memory
// and its /tmp by construction (docs/gateway.md, "The memory bound").
//
// The counts live in the shared dictionary gw_admit (ngx.shared); tests/gateway/js runs this on
// node with a fake one.

import cfg from 'gateway_config.js';

function take(a, key, n, cap) {
    if (n <= 0) {
        return true;
    }
    if (a.incr(key, n, 0) <= cap) {
        return true;
    }
    a.incr(key, -n, 0);
    return false;
}

function give(a, key, n) {
    if (n > 0) {
        a.incr(key, -n, 0);
    }
}

// The body bytes a request is taken to hold: what it declares, at most maxBodyBytes (nginx
// refuses a larger declaration with 413 before reading it).
function declaredBytes(r) {
    if (r.method !== 'POST') {
        return 0;
    }
    const n = Number(r.variables.content_length);
    return n >= 0 && r.variables.content_length !== '' ? Math.min(n, cfg.maxBodyBytes) : cfg.maxBodyBytes;
}

// js_set $gw_admit (nginx.conf, the rewrite phase of the API locations): '' admitted (or not
// counted: a caller without a known key is refused before its body is read), else the budget that
// is full: 'requests' or 'bodyBytes' ($gw_busy keeps it for nginx's answer, $gw_busy_body).
function admitRequest(r) {
    const a = ngx.shared.gw_admit;
    if (!a || r.variables.gw_admitted || r.variables.gw_busy) {
        return r.variables.gw_busy || '';
    }
    const who = cfg.apiKeys ? r.variables.gw_tenant : '';
    if (cfg.apiKeys && !who) {
        return '';
    }
    const limits = cfg.inFlight;
    const bytes = declaredBytes(r);
    let full = '';
    if (!take(a, 'requests|' + who, 1, limits.tenantRequests)) {
        full = 'requests';
    } else if (!take(a, 'bodyBytes|' + who, bytes, limits.tenantBodyBytes)) {
        give(a, 'requests|' + who, 1);
        full = 'bodyBytes';
    } else if (!take(a, 'requests', 1, limits.requests)) {
        give(a, 'requests|' + who, 1);
        give(a, 'bodyBytes|' + who, bytes);
        full = 'requests';
    } else if (!take(a, 'bodyBytes', bytes, limits.bodyBytes)) {
        give(a, 'requests|' + who, 1);
        give(a, 'bodyBytes|' + who, bytes);
        give(a, 'requests', 1);
        full = 'bodyBytes';
    }
    if (full) {
        r.variables.gw_busy = full;
        return full;
    }
    r.variables.gw_admitted = String(bytes);
    return '';
}

// A non-streaming call's fold, taken once its body is read (the fold is what costs memory).
function admitFold(r, who) {
    const a = ngx.shared.gw_admit;
    if (!a) {
        return true;
    }
    if (!take(a, 'folds|' + who, 1, cfg.inFlight.tenantFolds)) {
        return false;
    }
    if (!take(a, 'folds', 1, cfg.inFlight.folds)) {
        give(a, 'folds|' + who, 1);
        return false;
    }
    r.variables.gw_fold_admitted = '1';
    return true;
}

// Log phase: what the request took, given back.
function release(r) {
    const a = ngx.shared.gw_admit;
    const who = cfg.apiKeys ? r.variables.gw_tenant : '';
    if (!a) {
        return;
    }
    if (r.variables.gw_admitted) {
        const bytes = Number(r.variables.gw_admitted) || 0;
        give(a, 'requests|' + who, 1);
        give(a, 'requests', 1);
        give(a, 'bodyBytes|' + who, bytes);
        give(a, 'bodyBytes', bytes);
        r.variables.gw_admitted = '';
    }
    if (r.variables.gw_fold_admitted) {
        give(a, 'folds|' + who, 1);
        give(a, 'folds', 1);
        r.variables.gw_fold_admitted = '';
    }
}

export default {admitRequest, admitFold, release};
