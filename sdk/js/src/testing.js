// A scripted host for unit tests of transform logic with `node --test`: it
// answers requests from a script, in order per endpoint, records what the
// transform sent, attached and logged, and never touches a network or a
// wasm build.
//
//   const host = new MockHost().grant('llm').replyChat('llm', 'shipping');
//   const results = run(Topic, host, { labels: ['shipping', 'other'] }, [{ text: 'Where is my parcel?' }]);
//   assert.deepStrictEqual(results[0], [{ text: 'Where is my parcel?', topic: 'shipping' }]);

import { anthropicReplyBody, replyBody } from './chat.js';
import { overSend } from './complete.js';
import { CallError, Response, checkLevel } from './host.js';
import { RowError } from './row.js';
import { configureNode, processRows } from './transform.js';

/** A host whose endpoints answer from a script, in order per endpoint. */
export class MockHost {
  #nodeName;
  #endpoints = [];
  #script = new Map();

  constructor(nodeName = 'test') {
    this.#nodeName = nodeName;
    /** Every request the transform sent ({ endpoint, body, row }), in order. */
    this.requests = [];
    /** [row, key, value] of every audit attachment. */
    this.attached = [];
    /** [level, message] of every log line. */
    this.logs = [];
  }

  /** Grants `endpoints`, as the node's `endpoints:` would. */
  grant(...endpoints) {
    this.#endpoints.push(...endpoints);
    return this;
  }

  /** Queues a Response or CallError for the next request to `endpoint`. */
  answer(endpoint, result) {
    if (!this.#script.has(endpoint)) this.#script.set(endpoint, []);
    this.#script.get(endpoint).push(result);
    return this;
  }

  /** Queues an HTTP answer; `body` is text, or any JSON value. A status of
   * 400 or more arrives as a CallError of kind `status`, as the host
   * delivers it. */
  reply(endpoint, status, body, { attempts = 1 } = {}) {
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    const response = new Response(status, text, attempts, 0);
    return this.answer(endpoint, status >= 400 ? new CallError('status', `HTTP ${status}`, response) : response);
  }

  /** Queues an OpenAI-shaped chat answer whose text is `content`
   * ({ finishReason, usage, model } may be given). */
  replyChat(endpoint, content, details = {}) {
    return this.reply(endpoint, 200, replyBody(content, details));
  }

  /** Queues an Anthropic Messages-shaped answer whose text is `text`
   * ({ stopReason, usage, model } may be given). */
  replyAnthropic(endpoint, text, details = {}) {
    return this.reply(endpoint, 200, anthropicReplyBody(text, details));
  }

  /** Queues a failure without an answer: `transport`, `deadline-exceeded`
   * or `denied`. */
  fail(endpoint, kind, message) {
    return this.answer(endpoint, new CallError(kind, message));
  }

  /** The request bodies, parsed as JSON. */
  requestBodies() {
    return this.requests.map((r) => {
      try {
        return JSON.parse(r.body);
      } catch {
        return r.body;
      }
    });
  }

  /** How many scripted answers were never asked for. */
  unusedAnswers() {
    return [...this.#script.values()].reduce((sum, queue) => sum + queue.length, 0);
  }

  // The host's methods.

  send(requests) {
    return requests.map((request) => {
      const result = this.#nextAnswer(request);
      this.requests.push({ ...request });
      return result;
    });
  }

  /** Writes and reads typed chat requests as weir's host does, over `send`:
   * the scripted answers serve both. */
  complete(requests) {
    return overSend(this, requests);
  }

  attach(row, key, value) {
    this.attached.push([row, key, value]);
  }

  log(level, message) {
    this.logs.push([checkLevel(level), message]);
  }

  nodeName() {
    return this.#nodeName;
  }

  endpoints() {
    return [...this.#endpoints];
  }

  #nextAnswer(request) {
    if (!this.#endpoints.includes(request.endpoint)) {
      return new CallError('denied', `endpoint \`${request.endpoint}\` is not granted to node \`${this.#nodeName}\``);
    }
    const queue = this.#script.get(request.endpoint);
    if (!queue || queue.length === 0) {
      return new CallError(
        'transport',
        `MockHost has no answer scripted for this request to \`${request.endpoint}\`: ${request.body}`,
      );
    }
    return queue.shift();
  }
}

/** The node as weir would configure it with `options`; throws a
 * ConfigureError with the message weir would show. */
export function configure(TransformClass, host, options) {
  return configureNode(TransformClass, JSON.stringify(options), host).node;
}

/**
 * The results of one `process` call with these options and rows, as the real
 * host would make it: configure, then process every row together.
 *
 * One result per row: its output rows (an array of plain objects) or its
 * RowError (an exception thrown by the row code becomes `guest_exception`).
 * Throws a ConfigureError when the options are refused.
 */
export function run(TransformClass, host, options, rows) {
  const { node } = configureNode(TransformClass, JSON.stringify(options), host);
  return processRows(
    node,
    rows.map((row) => JSON.stringify(row)),
    host,
  ).map((r) => (r instanceof RowError ? r : r.map((text) => JSON.parse(text))));
}
