// Module resolve hooks for running @cloudflare/sandbox under plain Node
// (registered by register-standin.mjs: node --import ./register-standin.mjs):
//  - "cloudflare:workers" (Workers-only) -> ./cloudflare-workers-standin.mjs;
//  - @cloudflare/containers' dist uses bundler-style relative imports
//    without ".js" ("./lib/container"): retry those with ".js".
const STANDIN = new URL('./cloudflare-workers-standin.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier === 'cloudflare:workers') return { url: STANDIN, shortCircuit: true };
  try {
    return await next(specifier, context);
  } catch (err) {
    const relative = specifier.startsWith('./') || specifier.startsWith('../');
    if (err?.code !== 'ERR_MODULE_NOT_FOUND' || !relative || specifier.endsWith('.js')) throw err;
    return next(`${specifier}.js`, context);
  }
}
