// Chat requests, and their answers turned into text or a row error with a
// stable code. Requests are OpenAI chat-completions bodies, which weir's
// `openai` and `azure-openai` endpoints take (the host adds the URL and the
// key). Answers are read in the OpenAI shape (`choices`) and in the Anthropic
// Messages shape (`content` blocks, `stop_reason`).
//
// The row error codes are those of weir's built-in `llm` transform and the
// Rust SDK: llm_call_failed, retry_timeout, endpoint_denied,
// invalid_response, empty_response, response_truncated, content_filtered,
// context_length_exceeded, and response_unparsable for an answer that
// should hold JSON and does not.

import { CallError, ChatError, excerpt } from './host.js';
import { extractJson } from './json.js';
import { RowError } from './row.js';

/** A chat request. Only what is set is sent, so provider defaults apply.
 * Every setter returns the request, so calls chain. */
export class Chat {
  #model;
  #messages = [];
  #temperature;
  #maxTokens;
  #responseFormat;
  #extra = {};

  constructor(model = undefined) {
    this.#model = model ?? undefined;
  }

  /** The model to ask; undefined or null leaves it to the endpoint. */
  model(model) {
    this.#model = model ?? undefined;
    return this;
  }

  system(content) {
    return this.message('system', content);
  }

  user(content) {
    return this.message('user', content);
  }

  assistant(content) {
    return this.message('assistant', content);
  }

  message(role, content) {
    this.#messages.push({ role, content });
    return this;
  }

  temperature(temperature) {
    this.#temperature = temperature;
    return this;
  }

  maxTokens(maxTokens) {
    this.#maxTokens = maxTokens;
    return this;
  }

  /** Asks for a JSON object answer (`response_format: json_object`). */
  jsonObject() {
    this.#responseFormat = { type: 'json_object' };
    return this;
  }

  /** Asks for an answer that follows the JSON Schema `schema`. */
  jsonSchema(name, schema, strict = true) {
    this.#responseFormat = { type: 'json_schema', json_schema: { name, strict, schema } };
    return this;
  }

  /** Any other body parameter (`top_p`, `seed`, `stop`, ...), sent as given. */
  param(name, value) {
    this.#extra[name] = value;
    return this;
  }

  /** The request body as an object. */
  bodyValue() {
    const body = {};
    if (this.#model !== undefined) body.model = this.#model;
    body.messages = [...this.#messages];
    if (this.#temperature !== undefined) body.temperature = this.#temperature;
    if (this.#maxTokens !== undefined) body.max_tokens = this.#maxTokens;
    if (this.#responseFormat !== undefined) body.response_format = this.#responseFormat;
    return Object.assign(body, this.#extra);
  }

  /** The typed request to `endpoint` for row `row`, for `host.complete`. */
  request(endpoint, row = 0) {
    return {
      endpoint,
      row,
      messages: this.#messages.map((m) => ({ ...m })),
      model: this.#model,
      maxTokens: this.#maxTokens,
      temperature: this.#temperature,
      responseFormat: this.#responseFormat,
      extra: Object.keys(this.#extra).length ? { ...this.#extra } : undefined,
    };
  }

  /** The request body as JSON text. */
  body() {
    return JSON.stringify(this.bodyValue());
  }
}

/** A successful answer: the model's text and what the provider reported
 * about it (undefined where it reported nothing). `finishReason` is
 * `finish_reason` (OpenAI) or `stop_reason` (Anthropic), as sent; `usage` is
 * the provider's own object. */
export class Answer {
  constructor({ content, model, finishReason, usage, inputTokens, outputTokens, totalTokens }) {
    this.content = content;
    this.model = model;
    this.finishReason = finishReason;
    this.usage = usage;
    this.inputTokens = inputTokens;
    this.outputTokens = outputTokens;
    this.totalTokens = totalTokens;
  }

  /** The JSON the answer holds, even inside a ```json fence or a sentence;
   * a `response_unparsable` row error when it holds none. */
  json() {
    try {
      return extractJson(this.content);
    } catch (e) {
      throw new RowError('response_unparsable', `${e.message}: ${excerpt(this.content)}`);
    }
  }
}

/** The Answer in the final result of a chat request (a Response or a
 * CallError); throws a RowError with the code of what went wrong. */
export function interpret(result) {
  if (result instanceof CallError) {
    if (result.kind === 'status' && result.response) throw statusError(result.response);
    const code = { 'deadline-exceeded': 'retry_timeout', denied: 'endpoint_denied' }[result.kind] ?? 'llm_call_failed';
    throw new RowError(code, result.message);
  }
  if (!(result.status >= 200 && result.status < 300)) throw statusError(result);
  return parseAnswer(result.body);
}

/** The Answer in the result of a typed chat request (a ChatAnswer or a
 * ChatError), with the row error codes of interpret. */
export function interpretCompleted(result) {
  if (result instanceof ChatError) {
    if (result.callError) return interpret(result.callError);
    if (result.kind === 'invalid-request') throw new RowError('invalid_request', result.message);
    throw new RowError('invalid_response', `the answer is not a chat answer: ${excerpt(result.response?.body ?? '')}`);
  }
  let body;
  try {
    body = JSON.parse(result.body);
  } catch {
    body = undefined;
  }
  checkRefusal(Array.isArray(body?.choices) ? body.choices[0]?.message : undefined, result.text);
  checkFinish(result.finishReason === 'length', result.finishReason === 'content_filter', result.text);
  const usage = body?.usage;
  const { inputTokens, outputTokens } = result;
  return new Answer({
    content: result.text,
    model: result.model,
    finishReason: result.finishReason,
    usage: isObject(usage) ? usage : undefined,
    inputTokens,
    outputTokens,
    totalTokens: inputTokens === undefined || outputTokens === undefined ? undefined : inputTokens + outputTokens,
  });
}

/** The model's text in the final result of a chat request; see interpret. */
export function answer(result) {
  return interpret(result).content;
}

/** The Answer in a successful response body, OpenAI- or Anthropic-shaped. */
export function parseAnswer(body) {
  let value;
  try {
    value = JSON.parse(body);
  } catch (e) {
    throw new RowError('invalid_response', `the endpoint's answer is not JSON (${e.message}): ${excerpt(body)}`);
  }
  if (isObject(value) && 'choices' in value) return openaiAnswer(value, body);
  if (isObject(value) && Array.isArray(value.content)) return anthropicAnswer(value);
  throw new RowError(
    'invalid_response',
    `the answer has neither choices (OpenAI) nor content blocks (Anthropic): ${excerpt(body)}`,
  );
}

function openaiAnswer(value, body) {
  const choice = Array.isArray(value.choices) ? value.choices[0] : undefined;
  if (!isObject(choice)) throw new RowError('invalid_response', `the answer has no choices: ${excerpt(body)}`);
  const content = typeof choice.message?.content === 'string' ? choice.message.content : '';
  const reason = choice.finish_reason ?? undefined;
  checkRefusal(choice.message, content);
  checkFinish(reason === 'length', reason === 'content_filter', content);
  const usage = isObject(value.usage) ? value.usage : undefined;
  return new Answer({
    content,
    model: value.model,
    finishReason: reason,
    usage,
    inputTokens: int(usage, 'prompt_tokens'),
    outputTokens: int(usage, 'completion_tokens'),
    totalTokens: int(usage, 'total_tokens'),
  });
}

function anthropicAnswer(value) {
  const content = value.content
    .filter((block) => isObject(block) && block.type === 'text' && typeof block.text === 'string')
    .map((block) => block.text)
    .join('');
  const reason = value.stop_reason ?? undefined;
  checkFinish(reason === 'max_tokens', reason === 'refusal', content);
  const usage = isObject(value.usage) ? value.usage : undefined;
  const inputTokens = int(usage, 'input_tokens');
  const outputTokens = int(usage, 'output_tokens');
  return new Answer({
    content,
    model: value.model,
    finishReason: reason,
    usage,
    inputTokens,
    outputTokens,
    totalTokens: inputTokens === undefined || outputTokens === undefined ? undefined : inputTokens + outputTokens,
  });
}

// OpenAI's structured outputs decline in `refusal` rather than the text: the
// same code as Anthropic's `refusal` stop reason, with the model's words.
function checkRefusal(message, content) {
  const refusal = isObject(message) && typeof message.refusal === 'string' ? message.refusal.trim() : '';
  if (content.trim() === '' && refusal !== '') {
    throw new RowError('content_filtered', `the model refused to answer: ${excerpt(refusal)}`);
  }
}

function checkFinish(truncated, filtered, content) {
  if (truncated) {
    throw new RowError(
      'response_truncated',
      `the answer was cut off at max_tokens; raise max_tokens. Partial answer: ${excerpt(content)}`,
    );
  }
  if (filtered) throw new RowError('content_filtered', "the provider's content filter withheld the answer");
  if (content.trim() === '') throw new RowError('empty_response', 'the model answered with no text');
}

function int(usage, key) {
  return Number.isInteger(usage?.[key]) ? usage[key] : undefined;
}

function isObject(value) {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** The row error for an error status. The code comes from the provider's
 * error code, never its wording. */
export function statusError(response) {
  let error;
  try {
    error = JSON.parse(response.body)?.error;
  } catch {
    error = undefined;
  }
  error = isObject(error) ? error : {};
  const code = typeof error.code === 'string' ? error.code : '';
  const message = typeof error.message === 'string' ? error.message : excerpt(response.body);
  const rowCode =
    {
      context_length_exceeded: 'context_length_exceeded',
      content_filter: 'content_filtered',
      content_policy_violation: 'content_filtered',
    }[code] ?? 'llm_call_failed';
  const attempts = response.attempts > 1 ? ` after ${response.attempts} attempts` : '';
  return new RowError(rowCode, `HTTP ${response.status}${attempts}: ${message}`);
}

/** An OpenAI-shaped successful answer carrying `content`, as a provider
 * would send it; for scripted hosts and fixtures. */
export function replyBody(content, { finishReason = 'stop', usage, model } = {}) {
  const value = { object: 'chat.completion' };
  if (model !== undefined) value.model = model;
  value.choices = [{ index: 0, finish_reason: finishReason, message: { role: 'assistant', content } }];
  if (usage !== undefined) value.usage = usage;
  return JSON.stringify(value);
}

/** An Anthropic Messages-shaped successful answer carrying `text`. */
export function anthropicReplyBody(text, { stopReason = 'end_turn', usage, model } = {}) {
  const value = { type: 'message', role: 'assistant' };
  if (model !== undefined) value.model = model;
  value.content = [{ type: 'text', text }];
  value.stop_reason = stopReason;
  if (usage !== undefined) value.usage = usage;
  return JSON.stringify(value);
}
