// topic: labels each row's text with one of the configured topics, asked of
// a chat model.
//
// Options (the node's `options:` in the pipeline file):
//   labels    (required) the topics to choose from
//   field     (default "text") the row field to classify
//   output    (default "topic") the field the label is written to
//   model     sent as the request's model when given
//   endpoint  which granted endpoint to ask; by default the only one
//
// Row errors: missing_field, unknown_label (the model answered something
// else), llm_call_failed, retry_timeout, endpoint_denied, invalid_response.

import { send } from 'weir:transform/executor@0.2.0';
import { nodeName, endpoints } from 'weir:transform/context@0.2.0';

const KNOWN = new Set(['labels', 'field', 'output', 'model', 'endpoint']);

class RowFailure extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

let topic = null;

function setUp(options, node, granted) {
  const unknown = Object.keys(options).filter((k) => !KNOWN.has(k)).sort();
  if (unknown.length > 0) throw `options: unknown field \`${unknown[0]}\``;
  const labels = options.labels;
  if (!Array.isArray(labels) || !labels.every((l) => typeof l === 'string')) {
    throw 'options.labels: give the labels as a list of text';
  }
  if (labels.length === 0) throw 'options.labels: give at least one label';
  return {
    labels,
    field: options.field ?? 'text',
    output: options.output ?? 'topic',
    model: options.model,
    endpoint: pickEndpoint(options.endpoint, node, granted),
    systemPrompt: `Classify the text into exactly one of these labels: ${labels.join(', ')}. Answer with the label only.`,
  };
}

function pickEndpoint(chosen, node, granted) {
  if (chosen !== undefined) {
    if (granted.includes(chosen)) return chosen;
    throw `options.endpoint: \`${chosen}\` is not granted to node \`${node}\``;
  }
  if (granted.length === 1) return granted[0];
  throw `options.endpoint: node \`${node}\` is granted ${granted.length} endpoints; name the one to use`;
}

function textOf(row, field) {
  const value = row[field];
  if (value === undefined || value === null) {
    throw new RowFailure('missing_field', `the row has no field \`${field}\``);
  }
  if (typeof value !== 'string') throw new RowFailure('missing_field', `field \`${field}\` is not text`);
  return value;
}

function requestBody(text) {
  const body = {};
  if (topic.model !== undefined) body.model = topic.model;
  body.messages = [
    { role: 'system', content: topic.systemPrompt },
    { role: 'user', content: text },
  ];
  body.temperature = 0;
  return JSON.stringify(body);
}

function answerOf(result) {
  if (result.tag === 'err') {
    const error = result.val;
    if (error.tag === 'status') return answerOfStatus(error.val);
    const code = { 'deadline-exceeded': 'retry_timeout', denied: 'endpoint_denied' }[error.tag] ?? 'llm_call_failed';
    throw new RowFailure(code, error.val);
  }
  const response = result.val;
  if (response.status >= 300) return answerOfStatus(response);
  let content;
  try {
    content = JSON.parse(response.body).choices[0].message.content;
  } catch {
    content = undefined;
  }
  if (typeof content !== 'string') {
    throw new RowFailure('invalid_response', 'the answer has no choices[0].message.content');
  }
  return content;
}

function answerOfStatus(response) {
  let message;
  try {
    message = JSON.parse(response.body).error.message;
  } catch {
    message = undefined;
  }
  throw new RowFailure('llm_call_failed', `HTTP ${response.status}: ${message ?? response.body.slice(0, 200)}`);
}

function labelOf(answer) {
  const said = answer.trim().replace(/\.+$/, '').trim().toLowerCase();
  const label = topic.labels.find((l) => l.toLowerCase() === said);
  if (label === undefined) {
    throw new RowFailure(
      'unknown_label',
      `the model answered \`${answer.trim()}\`, which is not one of: ${topic.labels.join(', ')}`,
    );
  }
  return label;
}

const failed = (failure) => ({ tag: 'failed', val: { code: failure.code, message: failure.message } });

export const transform = {
  configure(options) {
    topic = setUp(JSON.parse(options), nodeName(), endpoints());
    return { outputFields: [topic.output] };
  },

  process(rows) {
    const outcomes = new Array(rows.length);
    const parsed = rows.map((text) => JSON.parse(text));
    const requests = [];
    const asked = [];
    parsed.forEach((row, index) => {
      try {
        requests.push({ endpoint: topic.endpoint, body: requestBody(textOf(row, topic.field)), row: index });
        asked.push(index);
      } catch (failure) {
        outcomes[index] = failed(failure);
      }
    });
    // One call for every row's request: the host sends them concurrently.
    const results = requests.length > 0 ? send(requests) : [];
    results.forEach((result, k) => {
      const index = asked[k];
      try {
        parsed[index][topic.output] = labelOf(answerOf(result));
        outcomes[index] = { tag: 'rows', val: [JSON.stringify(parsed[index])] };
      } catch (failure) {
        if (!(failure instanceof RowFailure)) throw failure;
        outcomes[index] = failed(failure);
      }
    });
    return outcomes;
  },
};
