// Loads gateway.js unmodified on node: its settings import (`gateway_config.js`, a bare name njs
// resolves through js_path) comes from $GATEWAY_CONFIG (rendered by the pytest wrapper), and both
// files are ES modules although their names end in .js outside a "type": "module" package.
import { register } from 'node:module';

register('./resolve.mjs', import.meta.url);
