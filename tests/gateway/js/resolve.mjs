import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';

// The gateway's scripts import their settings (`gateway_config.js`) and each other (`body.js`)
// by bare name, which njs resolves through js_path (the config directory they are all rendered
// into): here the settings come from $GATEWAY_CONFIG and the modules from the script directory.
const SCRIPTS = new URL('../../../components/compile/gateway/', import.meta.url);

export async function resolve(specifier, context, next) {
    if (specifier === 'gateway_config.js') {
        return {url: pathToFileURL(process.env.GATEWAY_CONFIG).href, format: 'module', shortCircuit: true};
    }
    if (/^[\w]+\.js$/.test(specifier) && existsSync(fileURLToPath(new URL(specifier, SCRIPTS)))) {
        return {url: new URL(specifier, SCRIPTS).href, format: 'module', shortCircuit: true};
    }
    const resolved = await next(specifier, context);
    if (resolved.url.startsWith(SCRIPTS.href) && resolved.url.endsWith('.js')) {
        return {...resolved, format: 'module'};
    }
    return resolved;
}
