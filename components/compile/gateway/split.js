// A next revision's share of a model's conversations (models[].next): which router id serves a
// conversation. Pure but for the settings; tests/gateway/js runs this on node.

import crypto from 'crypto';
import cfg from 'gateway_config.js';

function sha256(text) {
    return crypto.createHash('sha256').update(text).digest('hex');
}

function splitBucket(key) {
    return parseInt(sha256(JSON.stringify(['split', key])).slice(0, 8), 16) % 100;
}

function routedModel(model, key) {
    const split = cfg.splits && cfg.splits[model];
    if (!split || split.percent <= 0) {
        return model;
    }
    return split.percent >= 100 || splitBucket(key) < split.percent ? split.revision : model;
}

// The serving revision of a next revision's router id ('' for any other id).
function servingOf(model) {
    const splits = cfg.splits || {};
    for (const name in splits) {
        if (splits[name].revision === model) {
            return name;
        }
    }
    return '';
}

export default {splitBucket, routedModel, servingOf};
