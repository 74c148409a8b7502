// The host as the contract's imports. The bundle `weir guest build` makes
// resolves `#host` here (the `weir` condition); Node resolves it to
// host-native.js, so the same transform module imports in native tests.

import { send } from 'weir:transform/executor@0.2.0';
import { attach } from 'weir:transform/audit@0.2.0';
import { log } from 'weir:transform/log@0.2.0';
import { nodeName, endpoints } from 'weir:transform/context@0.2.0';
import { CallError, Response } from './host.js';

const response = (r) => new Response(r.status, r.body, r.attempts, r.latencyMs);

function result(r) {
  if (r.tag === 'ok') return response(r.val);
  const error = r.val;
  if (error.tag === 'status') return new CallError('status', `HTTP ${error.val.status}`, response(error.val));
  return new CallError(error.tag, String(error.val));
}

export const witHost = {
  send(requests) {
    return send(requests.map(({ endpoint, body, row }) => ({ endpoint, body, row }))).map(result);
  },
  attach(row, key, value) {
    attach(row, key, value);
  },
  log(level, message) {
    log(level, message);
  },
  nodeName() {
    return nodeName();
  },
  endpoints() {
    return [...endpoints()];
  },
};
