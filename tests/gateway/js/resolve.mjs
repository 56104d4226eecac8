import { pathToFileURL } from 'node:url';

export async function resolve(specifier, context, next) {
    if (specifier === 'gateway_config.js') {
        return {url: pathToFileURL(process.env.GATEWAY_CONFIG).href, format: 'module', shortCircuit: true};
    }
    const resolved = await next(specifier, context);
    if (resolved.url.endsWith('/gateway.js')) {
        return {...resolved, format: 'module'};
    }
    return resolved;
}
