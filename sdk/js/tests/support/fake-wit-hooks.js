// Module hooks for the component test: `weir:transform/...` (the contract's
// imports, which only exist inside a component) resolve to stand-ins that
// call into `globalThis.fakeWeir`, which the test script sets up.

const modules = {
  'weir:transform/executor@0.3.0': 'export const send = (requests) => globalThis.fakeWeir.send(requests);',
  'weir:transform/chat@0.3.0': 'export const complete = (requests) => globalThis.fakeWeir.complete(requests);',
  'weir:transform/audit@0.3.0': 'export const attach = (...args) => globalThis.fakeWeir.attached.push(args);',
  'weir:transform/log@0.3.0': 'export const log = (...args) => globalThis.fakeWeir.logs.push(args);',
  'weir:transform/context@0.3.0':
    'export const nodeName = () => "ask"; export const endpoints = () => globalThis.fakeWeir.endpoints;',
};

export async function resolve(specifier, context, next) {
  if (specifier in modules) {
    return { url: `data:text/javascript,${encodeURIComponent(modules[specifier])}`, shortCircuit: true };
  }
  return next(specifier, context);
}
