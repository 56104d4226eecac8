// The pools requests held while their model has no server count in (router.gateway.hold), and
// their fair share between tenants. The counts live in the shared dictionary gw_held
// (ngx.shared, given by the caller); tests/gateway/js runs this on node with a fake one.

import cfg from 'gateway_config.js';

function heldKey(model) {
    return 'model:' + model;
}

// The pools a held request counts in: its model's (maxPerModel) and all models' (maxTotal).
function holdPools(model) {
    return [[heldKey(model), cfg.hold.maxPerModel], ['total', cfg.hold.maxTotal]];
}

// The tenants that may hold requests: every configured one, and '' (no keys).
function holders() {
    return Object.keys(cfg.tenants).concat(['']);
}

// Counts a request of `who` into a pool of `cap` and says whether it may stay. A full pool is
// shared fairly: a tenant holding fewer than its share (the pool over the tenants holding in
// it, itself included) takes the place of a request of the tenant holding the most above its
// share, which gives way at its next look (an eviction mark); a tenant at or over its share is
// refused. So one tenant holding the whole pool blocks no other, and the pool holds at most
// `cap` requests but for the ones giving way (at most one look, 50 ms).
function enterPool(held, pool, cap, who) {
    const mine = held.incr(pool + '|' + who, 1, 0);
    const all = held.incr(pool, 1, 0);
    if (all <= cap) {
        return true;
    }
    const names = holders();
    let holding = 0;
    let victim = null;
    let most = 0;
    for (let i = 0; i < names.length; i++) {
        const n = held.get(pool + '|' + names[i]) || 0;
        if (n > 0) {
            holding++;
        }
        if (names[i] !== who && n > most) {
            most = n;
            victim = names[i];
        }
    }
    const share = Math.max(1, Math.floor(cap / holding));
    if (mine <= share && victim !== null && most > share) {
        held.incr(pool + '|evict|' + victim, 1, 0);
        return true;
    }
    leavePool(held, pool, who);
    return false;
}

function leavePool(held, pool, who) {
    held.incr(pool + '|' + who, -1, 0);
    held.incr(pool, -1, 0);
}

// Whether a request of `who` in `pool` is to give way (an eviction mark taken).
function evicted(held, pool, who) {
    const key = pool + '|evict|' + who;
    if ((held.get(key) || 0) <= 0) {
        return false;
    }
    if (held.incr(key, -1, 0) >= 0) {
        return true;
    }
    held.incr(key, 1, 0);
    return false;
}

export default {heldKey, holdPools, enterPool, leavePool, evicted};
