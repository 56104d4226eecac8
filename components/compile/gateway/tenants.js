// Tenants: the caller's API key -> its tenant (the keys Secret, re-read on each request so a
// rotated key takes effect without a restart; only hashes are stored), and what a tenant may use.
// tests/gateway/js runs this on node.

import crypto from 'crypto';
import fs from 'fs';
import cfg from 'gateway_config.js';

function sha256(text) {
    return crypto.createHash('sha256').update(text).digest('hex');
}

function bearer(r) {
    const auth = r.headersIn['Authorization'] || '';
    const m = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    return m ? m[1] : '';
}

// js_set $gw_tenant: the tenant of the request's API key, or '' (no keys configured, no key, or
// an unknown key). Hashes only: the Secret holds `<sha256 hex> <tenant>` lines.
function tenant(r) {
    if (!cfg.apiKeys) {
        return '';
    }
    const key = bearer(r);
    if (!key) {
        return '';
    }
    const digest = sha256(key);
    let text;
    try {
        text = fs.readFileSync(cfg.apiKeys.file, 'utf8');
    } catch (e) {
        r.error('gateway: cannot read the API key file ' + cfg.apiKeys.file + ': ' + e.message);
        return '';
    }
    const lines = text.split('\n');
    for (let i = 0; i < lines.length; i++) {
        const parts = lines[i].trim().split(/\s+/);
        if (parts.length >= 2 && parts[0].toLowerCase() === digest && tenantConfig(parts[1])) {
            return parts[1];
        }
    }
    return '';
}

// A configured tenant's settings, or null. Own properties only: a key line naming `constructor`,
// `__proto__` or `toString` must not find Object.prototype's members through cfg.tenants.
function tenantConfig(name) {
    return name && Object.prototype.hasOwnProperty.call(cfg.tenants, name) ? cfg.tenants[name] : null;
}

function allowedModels(tenantName) {
    const t = tenantConfig(tenantName);
    if (t && t.models) {
        return t.models;
    }
    return cfg.models;
}

export default {sha256, bearer, tenant, tenantConfig, allowedModels};
