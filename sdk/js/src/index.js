// Write weir transforms in JavaScript.
//
// A transform is one node of a weir pipeline: it receives rows (JSON
// objects), may call the endpoints the pipeline grants it, and returns
// output rows or a row error. Extend Transform, export it from transform.js
// with `export const transform = exportTransform(MyTransform)`, and build
// with `weir guest build`. Unit-test the same class natively with MockHost
// from weir-sdk/testing and `node --test`.

export {
  Answer,
  Chat,
  anthropicReplyBody,
  answer,
  interpret,
  interpretCompleted,
  parseAnswer,
  replyBody,
  statusError,
} from './chat.js';
export { exportTransform } from './component.js';
export { CallError, ChatAnswer, ChatError, LEVELS, Response, excerpt } from './host.js';
export { extractJson } from './json.js';
export { ConfigureError, Options, REQUIRED } from './options.js';
export { Row, RowError } from './row.js';
export { GUEST_EXCEPTION, NodeCx, RowCx, Transform, describe } from './transform.js';

/** The version of the `weir:transform` contract this SDK builds against. */
export const CONTRACT_VERSION = '0.3.0';
