// Stand-in for the Workers-only module "cloudflare:workers" (it exists only
// inside the Cloudflare Workers runtime). @cloudflare/sandbox's bundle
// imports it at load time for its Durable Object classes, which sbx's
// compatibility tests never use; the route-based SandboxClient does not
// touch any of these. Only the names the bundle imports are defined.
export class DurableObject {
  constructor(ctx, env) {
    this.ctx = ctx;
    this.env = env;
  }
}
export class WorkerEntrypoint {
  constructor(ctx, env) {
    this.ctx = ctx;
    this.env = env;
  }
}
export class RpcTarget {}
export const env = {};
export const tracing = {
  enterSpan(_name, fn, ...args) {
    return fn(undefined, ...args);
  },
};
