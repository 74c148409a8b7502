// The topic logic, natively, against weir-sdk's mock host: `node --test`.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigureError, RowError } from 'weir-sdk';
import { MockHost, configure, run } from 'weir-sdk/testing';
import { Topic } from './transform.js';

const OPTIONS = { labels: ['billing', 'shipping', 'other'] };

test('labels the row with what the model answered', () => {
  const host = new MockHost().grant('llm').replyChat('llm', ' Shipping.\n');
  const results = run(Topic, host, OPTIONS, [{ id: 7, text: 'Where is my parcel?' }]);
  assert.deepEqual(results[0], [{ id: 7, text: 'Where is my parcel?', topic: 'shipping' }]);
  const body = host.requestBodies()[0];
  assert.deepEqual(body.messages[1], { role: 'user', content: 'Where is my parcel?' });
  assert.ok(body.messages[0].content.includes('billing, shipping, other'));
  assert.equal(body.temperature, 0);
  assert.ok(!('model' in body));
});

test('an answer outside the labels fails that row only', () => {
  const host = new MockHost().grant('llm').replyChat('llm', 'weather').replyChat('llm', 'billing');
  const results = run(Topic, host, OPTIONS, [{ text: 'Is it raining?' }, { text: 'Refund me' }]);
  assert.equal(results[0].code, 'unknown_label');
  assert.deepEqual(results[1], [{ text: 'Refund me', topic: 'billing' }]);
});

test('a row without the field fails without a call', () => {
  const host = new MockHost().grant('llm');
  const [result] = run(Topic, host, OPTIONS, [{ body: 'x' }]);
  assert.ok(result instanceof RowError);
  assert.deepEqual([result.code, result.message], ['missing_field', 'the row has no field `text`']);
  assert.equal(host.requests.length, 0);
});

test('a failed call fails the row with its code', () => {
  const host = new MockHost()
    .grant('llm')
    .reply('llm', 429, { error: { message: 'Rate limit reached' } })
    .fail('llm', 'deadline-exceeded', '429 for 300 s');
  const results = run(Topic, host, OPTIONS, [{ text: 'a' }, { text: 'b' }]);
  assert.deepEqual([results[0].code, results[0].message], ['llm_call_failed', 'HTTP 429: Rate limit reached']);
  assert.equal(results[1].code, 'retry_timeout');
});

test('bad options name the option', () => {
  const refusal = (host, options) => {
    try {
      configure(Topic, host, options);
    } catch (e) {
      assert.ok(e instanceof ConfigureError, `${e}`);
      return e.message;
    }
    assert.fail('configure accepted the options');
  };
  assert.match(refusal(new MockHost().grant('llm'), { labels: [] }), /^options\.labels/);
  assert.match(refusal(new MockHost().grant('a', 'b'), OPTIONS), /^options\.endpoint/);
  assert.match(refusal(new MockHost().grant('llm'), { labels: ['x'], colour: 1 }), /unknown field `colour`/);
});
