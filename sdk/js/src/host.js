// The services a weir host gives a transform: the contract's imports inside
// a component, `MockHost` (weir-sdk/testing) in native tests. A host has
// send(requests), complete(chatRequests), attach(row, key, value),
// log(level, message), nodeName() and endpoints().

export const LEVELS = ['trace', 'debug', 'info', 'warn', 'error'];

/** The final answer to a request, after the host's retries. */
export class Response {
  constructor(status, body, attempts = 1, latencyMs = 0) {
    this.status = status;
    this.body = body;
    this.attempts = attempts;
    this.latencyMs = latencyMs;
  }
}

/**
 * Why a request got no successful answer. `kind` is one of:
 * - `denied`: the endpoint is not granted to this node, or the row index is wrong;
 * - `status`: an error status that is not retried, or a retryable one after the
 *   retries (`response` holds it);
 * - `deadline-exceeded`: capacity or transient errors outlasted the retry deadline;
 * - `transport`: no connection, or it broke before an answer.
 */
export class CallError {
  static KINDS = ['denied', 'status', 'deadline-exceeded', 'transport'];

  constructor(kind, message = '', response = undefined) {
    if (!CallError.KINDS.includes(kind)) {
      throw new TypeError(`CallError kind \`${kind}\` is not one of ${CallError.KINDS.join(', ')}`);
    }
    this.kind = kind;
    this.message = message;
    this.response = response;
  }

  toString() {
    if (this.kind === 'status' && this.response) {
      return `HTTP ${this.response.status}: ${excerpt(this.response.body)}`;
    }
    return `${this.kind}: ${this.message}`;
  }
}

/** A chat answer as the host reads it, for every provider alike.
 * `finishReason` is `stop`, `length`, `content_filter`, `tool_calls` or `other`;
 * `body` the provider's answer in the chat-completions shape. */
export class ChatAnswer {
  constructor({ text, finishReason, inputTokens, outputTokens, model, status = 200, attempts = 1, latencyMs = 0, body = '' }) {
    Object.assign(this, { text, finishReason, inputTokens, outputTokens, model, status, attempts, latencyMs, body });
  }
}

/**
 * Why a chat request got no answer. `kind` is one of:
 * - `call`: it failed as a `send` request would have (`callError` holds how);
 * - `invalid-request`: it could not be written; nothing was sent;
 * - `unreadable`: a successful answer that is not a chat answer (`response`).
 */
export class ChatError {
  static KINDS = ['call', 'invalid-request', 'unreadable'];

  constructor(kind, { message = '', callError = undefined, response = undefined } = {}) {
    if (!ChatError.KINDS.includes(kind)) {
      throw new TypeError(`ChatError kind \`${kind}\` is not one of ${ChatError.KINDS.join(', ')}`);
    }
    Object.assign(this, { kind, message, callError, response });
  }

  toString() {
    if (this.callError) return String(this.callError);
    if (this.response) return `not a chat answer (HTTP ${this.response.status}): ${excerpt(this.response.body)}`;
    return `${this.kind}: ${this.message}`;
  }
}

/** Keeps error messages readable when a body is huge (an HTML error page, say). */
export function excerpt(text, limit = 300) {
  const chars = Array.from(text);
  return chars.length <= limit ? text : `${chars.slice(0, limit).join('')}…`;
}

export function checkLevel(level) {
  if (!LEVELS.includes(level)) {
    throw new TypeError(`log level \`${level}\` is not one of ${LEVELS.join(', ')}`);
  }
  return level;
}
