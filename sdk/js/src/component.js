// The component side: the object ComponentizeJS exports as the contract's
// `transform` interface. In transform.js:
//
//   export const transform = exportTransform(MyTransform);

import { witHost } from '#host';
import { ConfigureError } from './options.js';
import { RowError } from './row.js';
import { configureNode, processRows } from './transform.js';

/** The `transform` export for the contract, running `TransformClass` (a
 * subclass of Transform) in the component's one instance. */
export function exportTransform(TransformClass) {
  let node;
  return {
    configure(options) {
      const host = requireHost();
      try {
        const configured = configureNode(TransformClass, options, host);
        node = configured.node;
        return { outputFields: configured.fields };
      } catch (e) {
        // A thrown value is how ComponentizeJS returns the `err` of a result:
        // here a config-error record.
        if (e instanceof ConfigureError) throw { path: e.path, message: e.detail };
        throw e;
      }
    },
    process(rows) {
      const host = requireHost();
      if (node === undefined) {
        return rows.map(() => failed(new RowError('not_configured', 'process was called before configure')));
      }
      return processRows(node, rows, host).map((r) => (r instanceof RowError ? failed(r) : { tag: 'rows', val: r }));
    },
  };
}

function failed(error) {
  return { tag: 'failed', val: { code: error.code, message: error.message } };
}

function requireHost() {
  if (witHost === undefined) {
    throw new Error(
      'weir-sdk: the transform export runs inside a weir component (weir guest build); natively, test it with weir-sdk/testing',
    );
  }
  return witHost;
}
