// Prometheus counters of this replica, in a shared dictionary (gw_metrics, 4 MiB, per pod), and
// their page (GET /metrics on the health port). Labels are bounded: the tenant comes from the
// config, the model is set only once admitted ('' before: 401, 429, bad bodies). Counted in the
// log phase (gateway.js, observe); tests/gateway/js runs this on node with a fake dictionary.

import cfg from 'gateway_config.js';
import pools from 'pools.js';

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const FAMILIES = [
    ['gateway_requests_total', 'counter', 'Requests answered, by tenant, model and HTTP status.'],
    ['gateway_rate_limited_total', 'counter', 'Requests answered 429 by the limits, by the limit reached.'],
    ['gateway_time_to_first_byte_seconds', 'histogram', "Time until the router's first byte (its response header)."],
    ['gateway_request_duration_seconds', 'histogram', 'Time from the request to the end of its answer.'],
    ['gateway_prompt_tokens_total', 'counter', 'Prompt (input) tokens, as the engine reported them.'],
    ['gateway_completion_tokens_total', 'counter', 'Completion (output) tokens, as the engine reported them.'],
    ['gateway_held_total', 'counter', 'Requests held while their model had no server, by how the hold ended '
        + '(released, timeout, full: over a bound, gone: the client left, preempted: gave way to another tenant).'],
    ['gateway_next_revision_fallbacks_total', 'counter', "Requests of a next revision's share sent to the serving "
        + 'revision, its router having no server for the next one (model: the next revision).'],
];

function labelValue(v) {
    return String(v).replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function histogram(m, name, series, seconds) {
    // Every bucket is written (0 adds nothing but creates it): a histogram lists all of them.
    for (let i = 0; i < BUCKETS.length; i++) {
        m.incr(name + '_bucket' + series + ',le="' + BUCKETS[i] + '"}', seconds <= BUCKETS[i] ? 1 : 0, 0);
    }
    m.incr(name + '_bucket' + series + ',le="+Inf"}', 1, 0);
    m.incr(name + '_sum' + series + '}', seconds, 0);
    m.incr(name + '_count' + series + '}', 1, 0);
}

// What the fold server said of a folded answer, in its response header named by the settings
// (foldHeaders; the front hides them from the client): nginx's $upstream_http_<name>.
function foldAnswerHeader(r, which) {
    return r.variables['upstream_http_' + cfg.foldHeaders[which].replace(/-/g, '_')] || '';
}

// The log phase's counting of one answer (gateway.js, observe).
function count(r) {
    const m = ngx.shared.gw_metrics;
    if (!m) {
        return;
    }
    const series = '{tenant="' + labelValue(r.variables.gw_tenant || '') + '",model="'
        + labelValue(r.variables.gw_model || '') + '"';
    const status = r.variables.status;
    m.incr('gateway_requests_total' + series + ',status="' + status + '"}', 1, 0);
    if (status === '429') {
        m.incr('gateway_rate_limited_total' + series + ',limit="' + (r.variables.gw_limit_kind || 'requests') + '"}', 1, 0);
    }
    // Folded answers: the router's first byte as the fold server saw it.
    const first = parseFloat(foldAnswerHeader(r, 'firstByte') || r.variables.upstream_header_time || '');
    if (first >= 0) {
        histogram(m, 'gateway_time_to_first_byte_seconds', series, first);
    }
    histogram(m, 'gateway_request_duration_seconds', series, parseFloat(r.variables.request_time) || 0);
    const prompt = Number(r.variables.gw_prompt_used || foldAnswerHeader(r, 'promptUsed') || 0);
    const completion = Number(r.variables.gw_completion_used || foldAnswerHeader(r, 'completionUsed') || 0);
    if (prompt > 0) {
        m.incr('gateway_prompt_tokens_total' + series + '}', prompt, 0);
    }
    if (completion > 0) {
        m.incr('gateway_completion_tokens_total' + series + '}', completion, 0);
    }
}

// A histogram's buckets in increasing `le` order (as text, "10" would sort before "2.5").
function bySeriesThenBucket(x, y) {
    const le = /,le="([^"]*)"\}$/;
    const mx = le.exec(x);
    const my = le.exec(y);
    const bx = mx ? x.slice(0, mx.index) : x;
    const by = my ? y.slice(0, my.index) : y;
    if (bx !== by || !mx || !my) {
        return bx < by ? -1 : (bx > by ? 1 : (x < y ? -1 : 1));
    }
    const vx = mx[1] === '+Inf' ? Infinity : parseFloat(mx[1]);
    const vy = my[1] === '+Inf' ? Infinity : parseFloat(my[1]);
    return vx - vy;
}

// The held requests now, one series per admitted model (0 too: a scaler's query then always finds
// its series, and a model asleep with nobody waiting reads 0, not "no data").
function heldLines(lines) {
    const held = ngx.shared.gw_held;
    if (!cfg.hold || !held) {
        return;
    }
    lines.push('# HELP gateway_held_requests Requests held now while their model has no server (this replica).',
               '# TYPE gateway_held_requests gauge');
    for (let i = 0; i < cfg.models.length; i++) {
        lines.push('gateway_held_requests{model="' + labelValue(cfg.models[i]) + '"} '
                   + Math.max(0, held.get(pools.heldKey(cfg.models[i])) || 0));
    }
}

// GET /metrics on the health port: the counters in Prometheus' text format.
function page(r) {
    const m = ngx.shared.gw_metrics;
    const keys = m ? m.keys().sort(bySeriesThenBucket) : [];
    const lines = [];
    for (let f = 0; f < FAMILIES.length; f++) {
        const name = FAMILIES[f][0];
        lines.push('# HELP ' + name + ' ' + FAMILIES[f][2], '# TYPE ' + name + ' ' + FAMILIES[f][1]);
        const prefixes = FAMILIES[f][1] === 'histogram' ? [name + '_bucket{', name + '_sum{', name + '_count{'] : [name + '{'];
        for (let p = 0; p < prefixes.length; p++) {
            for (let k = 0; k < keys.length; k++) {
                if (keys[k].indexOf(prefixes[p]) === 0) {
                    lines.push(keys[k] + ' ' + m.get(keys[k]));
                }
            }
        }
    }
    heldLines(lines);
    r.headersOut['Content-Type'] = 'text/plain; version=0.0.4';
    r.return(200, lines.join('\n') + '\n');
}

function countFallback(model) {
    const m = ngx.shared.gw_metrics;
    if (m) {
        m.incr('gateway_next_revision_fallbacks_total{model="' + labelValue(model) + '"}', 1, 0);
    }
}

function countHold(model, outcome) {
    const m = ngx.shared.gw_metrics;
    if (m) {
        m.incr('gateway_held_total{model="' + labelValue(model) + '",outcome="' + outcome + '"}', 1, 0);
    }
}

export default {count, page, labelValue, countHold, countFallback};
