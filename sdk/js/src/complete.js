// What weir's host does for a typed chat request, written over `send`: the
// chat-completions body it writes and how it reads the answer. MockHost
// answers `complete` this way, so a transform's tests see the bodies the real
// host would send. The host's executor hands back Anthropic answers in the
// chat shape; a scripted Anthropic answer is read the same way here.

import { CallError, ChatAnswer, ChatError } from './host.js';

const ANTHROPIC_REASONS = { max_tokens: 'length', tool_use: 'tool_calls', refusal: 'content_filter' };
const KNOWN = ['stop', 'length', 'content_filter', 'tool_calls'];

/** One result per request, in order: a ChatAnswer or a ChatError. */
export function overSend(host, requests) {
  const written = requests.map((r) => {
    try {
      return { endpoint: r.endpoint, body: body(r), row: r.row ?? 0 };
    } catch (e) {
      return new ChatError('invalid-request', { message: e.message });
    }
  });
  const sent = host.send(written.filter((w) => !(w instanceof ChatError)));
  let next = 0;
  return written.map((w) => {
    if (w instanceof ChatError) return w;
    const result = sent[next++] ?? new CallError('transport', 'the host returned no result');
    return result instanceof CallError ? new ChatError('call', { message: String(result), callError: result }) : read(result);
  });
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** The chat-completions body: `extra`, with the typed fields over it. */
export function body(request) {
  if (request.extra !== undefined && !isObject(request.extra)) {
    throw new TypeError(`extra is not a JSON object: ${JSON.stringify(request.extra)}`);
  }
  const value = { ...request.extra };
  if (request.model !== undefined) value.model = request.model;
  value.messages = request.messages.map(({ role, content }) => ({ role, content }));
  if (request.maxTokens !== undefined) value.max_tokens = request.maxTokens;
  if (request.temperature !== undefined) {
    if (!Number.isFinite(request.temperature)) throw new TypeError(`temperature ${request.temperature} is not a finite number`);
    value.temperature = request.temperature;
  }
  if (request.responseFormat !== undefined) {
    if (!isObject(request.responseFormat)) {
      throw new TypeError(`response-format is not a JSON object: ${JSON.stringify(request.responseFormat)}`);
    }
    value.response_format = request.responseFormat;
  }
  return JSON.stringify(value);
}

/** A successful answer read, or an `unreadable` ChatError. */
export function read(response) {
  let value;
  try {
    value = JSON.parse(response.body);
  } catch {
    value = undefined;
  }
  const unreadable = () => new ChatError('unreadable', { response });
  if (!isObject(value)) return unreadable();
  let text;
  let reason;
  let counts;
  const choice = Array.isArray(value.choices) ? value.choices[0] : undefined;
  if (isObject(choice)) {
    const content = choice.message?.content;
    text = typeof content === 'string' ? content : '';
    reason = choice.finish_reason === 'function_call' ? 'tool_calls' : choice.finish_reason;
    counts = ['prompt_tokens', 'completion_tokens'];
  } else if (Array.isArray(value.content)) {
    text = value.content.map((b) => (isObject(b) && typeof b.text === 'string' ? b.text : '')).join('');
    reason = ANTHROPIC_REASONS[value.stop_reason] ?? 'stop';
    counts = ['input_tokens', 'output_tokens'];
  } else {
    return unreadable();
  }
  const usage = isObject(value.usage) ? value.usage : undefined;
  const count = (key) => (usage === undefined ? undefined : (usage[key] ?? 0));
  return new ChatAnswer({
    text,
    finishReason: KNOWN.includes(reason) ? reason : 'other',
    inputTokens: count(counts[0]),
    outputTokens: count(counts[1]),
    model: typeof value.model === 'string' ? value.model : undefined,
    status: response.status,
    attempts: response.attempts,
    latencyMs: response.latencyMs,
    body: response.body,
  });
}
