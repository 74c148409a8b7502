// The host as the contract's imports. The bundle `weir guest build` makes
// resolves `#host` here (the `weir` condition); Node resolves it to
// host-native.js, so the same transform module imports in native tests.

import { send } from 'weir:transform/executor@0.3.0';
import { complete } from 'weir:transform/chat@0.3.0';
import { attach } from 'weir:transform/audit@0.3.0';
import { log } from 'weir:transform/log@0.3.0';
import { nodeName, endpoints } from 'weir:transform/context@0.3.0';
import { CallError, ChatAnswer, ChatError, Response } from './host.js';

const response = (r) => new Response(r.status, r.body, r.attempts, r.latencyMs);

function result(r) {
  if (r.tag === 'ok') return response(r.val);
  const error = r.val;
  if (error.tag === 'status') return new CallError('status', `HTTP ${error.val.status}`, response(error.val));
  return new CallError(error.tag, String(error.val));
}

const json = (value) => (value === undefined ? undefined : JSON.stringify(value));

function chatResult(r) {
  if (r.tag === 'ok') {
    const { usage, ...answer } = r.val;
    return new ChatAnswer({ ...answer, inputTokens: usage?.inputTokens, outputTokens: usage?.outputTokens });
  }
  const error = r.val;
  if (error.tag === 'call') {
    const failed = result({ tag: 'err', val: error.val });
    return new ChatError('call', { message: String(failed), callError: failed });
  }
  if (error.tag === 'unreadable') return new ChatError('unreadable', { response: response(error.val) });
  return new ChatError('invalid-request', { message: String(error.val) });
}

export const witHost = {
  send(requests) {
    return send(requests.map(({ endpoint, body, row }) => ({ endpoint, body, row }))).map(result);
  },
  complete(requests) {
    return complete(
      requests.map((r) => ({
        endpoint: r.endpoint,
        row: r.row ?? 0,
        messages: r.messages.map(({ role, content }) => ({ role, content })),
        model: r.model ?? undefined,
        maxTokens: r.maxTokens ?? undefined,
        temperature: r.temperature ?? undefined,
        responseFormat: json(r.responseFormat),
        extra: json(r.extra),
      })),
    ).map(chatResult);
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
