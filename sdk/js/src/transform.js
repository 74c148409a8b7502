// The class a transform extends, what it is handed while it works, and the
// glue that turns its results and exceptions into what the contract
// carries. The same glue serves the component (exportTransform) and the
// mock host (weir-sdk/testing), so a unit test sees what weir would.

import { Chat, interpret, interpretCompleted } from './chat.js';
import { CallError, ChatError, checkLevel } from './host.js';
import { ConfigureError, Options } from './options.js';
import { Row, RowError } from './row.js';

export const GUEST_EXCEPTION = 'guest_exception';

/**
 * A transform node. One object is made per component instance, from the
 * node's options, and then processes many calls of rows.
 *
 * Subclasses override:
 * - `constructor(options, node)`: checks `options` (an Options) and keeps the
 *   settings; throw `new ConfigureError('options.NAME: ...')` to refuse them.
 *   `node` is a NodeCx.
 * - `outputFields()`: the fields this node adds, in order.
 * - `processRow(row, cx)`: returns the row (a Row or a plain object), an
 *   array of rows (none drops the row, several expand it), or throws a
 *   RowError to fail this row alone. Any other exception fails the row too,
 *   with code `guest_exception`.
 * - optionally `process(rows, host)`, to send every row's requests of a call
 *   in one concurrent `host.send`.
 */
export class Transform {
  constructor(options, node) {
    this.options = options;
    this.node = node;
  }

  outputFields() {
    return [];
  }

  processRow(_row, _cx) {
    throw new Error(`${this.constructor.name} does not implement processRow`);
  }

  /** One result per row, in order: its output rows, or the exception that
   * failed it. The default handles the rows one by one. */
  process(rows, host) {
    return rows.map((row, index) => {
      try {
        return this.processRow(row, new RowCx(host, index));
      } catch (e) {
        if (isOutOfMemory(e)) throw e;
        return new Thrown(e);
      }
    });
  }
}

/** An exception a row's code threw, kept as that row's result. */
export class Thrown {
  constructor(error) {
    this.error = error;
  }
}

/** What a node knows about itself while it is configured. */
export class NodeCx {
  constructor(name, endpoints) {
    /** The node's name in the pipeline file. */
    this.name = name;
    /** The granted endpoints, in the pipeline file's order. */
    this.endpoints = [...endpoints];
  }

  /** The endpoint to use: `chosen` if given and granted, else the only
   * granted one. The error is phrased for `options.endpoint`. */
  endpoint(chosen = undefined) {
    const granted = this.endpoints.join(', ') || 'none';
    if (chosen !== undefined && chosen !== null) {
      if (this.endpoints.includes(chosen)) return chosen;
      throw new ConfigureError(
        `options.endpoint: \`${chosen}\` is not granted to node \`${this.name}\` (granted: ${granted})`,
      );
    }
    if (this.endpoints.length === 1) return this.endpoints[0];
    throw new ConfigureError(
      `options.endpoint: node \`${this.name}\` is granted ${this.endpoints.length} endpoints (${granted}); name the one to use`,
    );
  }
}

/** The host, seen from one row of the current call: requests and audit
 * entries are filed under this row. */
export class RowCx {
  constructor(host, index) {
    this.host = host;
    /** This row's index within the current call. */
    this.index = index;
  }

  /** Sends one request (a body as JSON text or an object); returns the
   * Response or the CallError. */
  send(endpoint, body) {
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    const results = this.host.send([{ endpoint, body: text, row: this.index }]);
    return results[0] ?? new CallError('transport', 'the host returned no result');
  }

  /** Sends a Chat in the typed shape (the host writes the provider's body);
   * returns the ChatAnswer or the ChatError. */
  complete(endpoint, chat) {
    const results = this.host.complete([chat.request(endpoint, this.index)]);
    const none = new CallError('transport', 'the host returned no result');
    return results[0] ?? new ChatError('call', { message: String(none), callError: none });
  }

  /** Sends a chat request (a Chat, or a raw body sent as it is); returns the
   * Answer or throws its RowError. */
  ask(endpoint, chat) {
    if (chat instanceof Chat) return interpretCompleted(this.complete(endpoint, chat));
    return interpret(this.send(endpoint, chat));
  }

  /** Sends a chat request; returns the model's text or throws its RowError. */
  chat(endpoint, chat) {
    return this.ask(endpoint, chat).content;
  }

  /** Sends a chat request; returns the JSON the answer holds. */
  chatJson(endpoint, chat) {
    return this.ask(endpoint, chat).json();
  }

  /** Adds a fact to this row's record in the audit trail. */
  attach(key, value) {
    this.host.attach(this.index, key, String(value));
  }

  log(level, message) {
    this.host.log(checkLevel(level), message);
  }
}

/**
 * Makes the node from its options as the host sends them: `{ node, fields }`,
 * or throws a ConfigureError with the message weir shows. Any exception of
 * the author's code becomes one, so a bad option or a bug refuses the node
 * instead of trapping.
 */
export function configureNode(TransformClass, optionsText, host) {
  let values;
  try {
    values = JSON.parse(optionsText);
  } catch (e) {
    throw new ConfigureError(`options: not valid JSON: ${e.message}`);
  }
  try {
    const node = new TransformClass(new Options(values), new NodeCx(host.nodeName(), host.endpoints()));
    const fields = node.outputFields();
    if (!Array.isArray(fields) || !fields.every((f) => typeof f === 'string')) {
      throw new TypeError('outputFields must return an array of field names');
    }
    return { node, fields: [...fields] };
  } catch (e) {
    if (e instanceof ConfigureError || isOutOfMemory(e)) throw e;
    // A thrown string is the message itself: the contract's own convention.
    if (typeof e === 'string') throw new ConfigureError(e);
    logStack(host, 'configure threw', e);
    throw new ConfigureError(describe(e));
  }
}

/**
 * One result per row text: an array of output rows as JSON text, or the
 * RowError that failed the row. An exception fails its row (or, thrown from
 * `process` itself, every row of the call) with code `guest_exception`;
 * running out of memory is left to trap, as the host must see it.
 */
export function processRows(node, texts, host) {
  const parsed = texts.map((text) => {
    try {
      return Row.parse(text);
    } catch (e) {
      return e;
    }
  });
  if (parsed.some((r) => r instanceof RowError)) {
    // A row the host sent is not an object: handle the others one by one.
    return parsed.map((row, index) => {
      if (row instanceof RowError) return row;
      try {
        return toTexts(node.processRow(row, new RowCx(host, index)), host);
      } catch (e) {
        return rowError(e, host);
      }
    });
  }
  let outputs;
  try {
    outputs = node.process(parsed, host);
    if (!Array.isArray(outputs) || outputs.length !== parsed.length) {
      throw new TypeError(`process must return one result per row (${parsed.length}), not ${count(outputs)}`);
    }
  } catch (e) {
    const error = rowError(e, host);
    return parsed.map(() => error);
  }
  return outputs.map((output) => toTexts(output, host));
}

function toTexts(output, host) {
  if (output instanceof Thrown) return rowError(output.error, host);
  if (output instanceof Error) return rowError(output, host);
  try {
    const rows = Array.isArray(output) ? output : [output];
    if (output === undefined || output === null || !rows.every(isRowLike)) {
      const hint = output === undefined ? '; was `return row` forgotten?' : '';
      throw new TypeError(`a row's result must be a row or an array of rows, not ${count(output)}${hint}`);
    }
    return rows.map((row) => JSON.stringify(row instanceof Row ? row.fields : row));
  } catch (e) {
    return rowError(e, host);
  }
}

function isRowLike(value) {
  return value instanceof Row || (value !== null && typeof value === 'object' && !Array.isArray(value));
}

function rowError(e, host) {
  if (isOutOfMemory(e)) throw e;
  if (e instanceof RowError) return e;
  logStack(host, 'row code threw', e);
  return new RowError(GUEST_EXCEPTION, describe(e));
}

/** `TypeError: x is undefined`: the exception's type and message. */
export function describe(e) {
  if (e instanceof Error) return e.message ? `${e.name}: ${e.message}` : e.name;
  if (typeof e === 'string') return e;
  try {
    return `thrown: ${JSON.stringify(e)}`;
  } catch {
    return `thrown: ${String(e)}`;
  }
}

/** SpiderMonkey reports exhausted memory as an exception; it must still
 * trap, so that weir sees the memory limit and drops the instance. */
export function isOutOfMemory(e) {
  return e === 'out of memory' || (e instanceof Error && e.name === 'InternalError' && /out of memory/.test(e.message));
}

function logStack(host, what, e) {
  if (e instanceof Error && e.stack) {
    try {
      host.log('debug', `${what}: ${describe(e)}\n${e.stack}`);
    } catch {
      // The log is a courtesy; the row error carries what matters.
    }
  }
}

function count(value) {
  if (value === undefined) return 'undefined';
  if (value === null) return 'null';
  if (Array.isArray(value)) return `${value.length} results`;
  return typeof value;
}
