import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CallError, Chat, Response, RowError, anthropicReplyBody, extractJson, interpret, interpretCompleted, replyBody } from '../src/index.js';

const ok = (body, status = 200) => new Response(status, typeof body === 'string' ? body : JSON.stringify(body));

function codeOf(result) {
  try {
    interpret(result);
  } catch (e) {
    assert.ok(e instanceof RowError, `${e}`);
    return e.code;
  }
  assert.fail('interpret accepted the answer');
}

function errorOf(result) {
  try {
    interpret(result);
  } catch (e) {
    return { code: e.code, message: e.message };
  }
  assert.fail('interpret accepted the answer');
}

test('only what is set is sent', () => {
  assert.deepEqual(JSON.parse(new Chat().user('hi').body()), { messages: [{ role: 'user', content: 'hi' }] });
  const body = JSON.parse(new Chat('m').temperature(0).maxTokens(3).jsonObject().system('s').user('u').param('seed', 7).body());
  assert.deepEqual(body, {
    model: 'm',
    messages: [
      { role: 'system', content: 's' },
      { role: 'user', content: 'u' },
    ],
    temperature: 0,
    max_tokens: 3,
    response_format: { type: 'json_object' },
    seed: 7,
  });
});

test('a JSON schema is requested by name', () => {
  const schema = { type: 'object', properties: { a: { type: 'string' } } };
  assert.deepEqual(new Chat().user('u').jsonSchema('answer', schema).bodyValue().response_format, {
    type: 'json_schema',
    json_schema: { name: 'answer', strict: true, schema },
  });
});

test('an OpenAI answer gives text, usage and model', () => {
  const a = interpret(
    ok({
      model: 'm1',
      choices: [{ message: { content: 'positive' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
    }),
  );
  assert.deepEqual([a.content, a.model, a.finishReason], ['positive', 'm1', 'stop']);
  assert.deepEqual([a.inputTokens, a.outputTokens, a.totalTokens], [3, 1, 4]);
});

test('an Anthropic answer gives text, usage and stop reason', () => {
  const a = interpret(
    ok({
      type: 'message',
      model: 'claude-x',
      content: [
        { type: 'text', text: 'bill' },
        { type: 'tool_use', id: 't' },
        { type: 'text', text: 'ing' },
      ],
      stop_reason: 'end_turn',
      usage: { input_tokens: 12, output_tokens: 2 },
    }),
  );
  assert.deepEqual([a.content, a.model, a.finishReason], ['billing', 'claude-x', 'end_turn']);
  assert.deepEqual([a.inputTokens, a.outputTokens, a.totalTokens], [12, 2, 14]);
});

test('truncated, filtered and empty answers are row errors', () => {
  assert.equal(codeOf(ok({ choices: [{ message: { content: 'posi' }, finish_reason: 'length' }] })), 'response_truncated');
  assert.equal(codeOf(ok({ choices: [{ message: { content: null }, finish_reason: 'content_filter' }] })), 'content_filtered');
  assert.equal(codeOf(ok({ choices: [{ message: { content: '  ' }, finish_reason: 'stop' }] })), 'empty_response');
  assert.equal(codeOf(ok(anthropicReplyBody('posi', { stopReason: 'max_tokens' }))), 'response_truncated');
  assert.equal(codeOf(ok(anthropicReplyBody('', { stopReason: 'refusal' }))), 'content_filtered');
  assert.equal(codeOf(ok({ type: 'message', content: [], stop_reason: 'end_turn' })), 'empty_response');
});

test('a refusal is a row error with the model words, raw or typed', () => {
  const body = { choices: [{ message: { content: null, refusal: "I can't help with that." }, finish_reason: 'stop' }] };
  const typed = { text: '', finishReason: 'stop', body: JSON.stringify(body) };
  for (const read of [() => interpret(ok(body)), () => interpretCompleted(typed)]) {
    assert.throws(read, (e) => {
      assert.ok(e instanceof RowError, `${e}`);
      assert.deepEqual([e.code, e.message], ['content_filtered', "the model refused to answer: I can't help with that."]);
      return true;
    });
  }
});

test('answers that are not chat answers are invalid', () => {
  assert.equal(codeOf(ok('<html>oops</html>')), 'invalid_response');
  assert.equal(codeOf(ok({ choices: [] })), 'invalid_response');
  assert.equal(codeOf(ok({ something: 'else' })), 'invalid_response');
  assert.equal(codeOf(ok([1, 2])), 'invalid_response');
});

test('provider error codes pick the row error code', () => {
  const tooLong = JSON.stringify({ error: { message: 'too long', code: 'context_length_exceeded' } });
  assert.deepEqual(errorOf(new CallError('status', '', new Response(400, tooLong))), {
    code: 'context_length_exceeded',
    message: 'HTTP 400: too long',
  });
  assert.deepEqual(errorOf(new CallError('status', '', new Response(500, '<html>Bad gateway</html>', 4))), {
    code: 'llm_call_failed',
    message: 'HTTP 500 after 4 attempts: <html>Bad gateway</html>',
  });
  const overloaded = JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
  assert.deepEqual(errorOf(new CallError('status', '', new Response(529, overloaded))), {
    code: 'llm_call_failed',
    message: 'HTTP 529: Overloaded',
  });
  assert.equal(codeOf(ok({ error: { code: 'content_filter', message: 'no' } }, 400)), 'content_filtered');
});

test('executor failures map to codes', () => {
  assert.equal(codeOf(new CallError('deadline-exceeded', '429 for 300 s')), 'retry_timeout');
  assert.equal(codeOf(new CallError('transport', 'connection refused')), 'llm_call_failed');
  assert.equal(codeOf(new CallError('denied', 'no endpoint `x`')), 'endpoint_denied');
});

test('a JSON answer tolerates a fence and prose', () => {
  assert.deepEqual(interpret(ok(replyBody('```json\n{"a": 2}\n```'))).json(), { a: 2 });
  assert.throws(() => interpret(ok(replyBody('no json here'))).json(), (e) => e.code === 'response_unparsable');
});

test('JSON is found plain, fenced or surrounded', () => {
  assert.deepEqual(extractJson(' {"a": 1} '), { a: 1 });
  assert.deepEqual(extractJson('Sure!\n```json\n{"a": 2}\n```\nHope it helps.'), { a: 2 });
  assert.deepEqual(extractJson('```\n[1, 2]\n```'), [1, 2]);
  assert.deepEqual(extractJson('Here you go: {"a": "x}", "b": {"c": [1]}} — done {'), { a: 'x}', b: { c: [1] } });
  assert.throws(() => extractJson('no json here {oops'), /holds no JSON/);
});
