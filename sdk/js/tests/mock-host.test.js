import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Chat, ConfigureError, RowError, Transform, interpret } from '../src/index.js';
import { MockHost, configure, run } from '../src/testing.js';

class Shout extends Transform {
  constructor(options, node) {
    super(options, node);
    options.refuseUnknown('endpoint', 'failOn');
    this.endpoint = node.endpoint(options.text('endpoint', undefined));
    this.failOn = options.text('failOn', undefined);
    if (this.failOn === 'configure') throw new Error('boom at configure');
    if (this.failOn === 'string') throw 'options.failOn: refused as a string';
  }

  outputFields() {
    return ['loud'];
  }

  processRow(row, cx) {
    const text = row.strField('text');
    if (text === this.failOn) throw new Error('boom');
    if (text === 'undefined property') return row.fields.nothing.deeper;
    cx.attach('prompt_chars', text.length);
    cx.log('debug', `shouting row ${cx.index}`);
    return row.set('loud', cx.chat(this.endpoint, new Chat().temperature(0).user(`Shout: ${text}`)));
  }
}

const isRowError = (value, code, message) =>
  value instanceof RowError && value.code === code && (message === undefined || value.message === message);

test('answers are scripted per endpoint in order, and requests recorded', () => {
  const host = new MockHost().grant('llm').replyChat('llm', 'HELLO').replyChat('llm', 'BYE');
  const results = run(Shout, host, {}, [{ text: 'hello' }, { text: 'bye' }]);
  assert.deepEqual(results, [[{ text: 'hello', loud: 'HELLO' }], [{ text: 'bye', loud: 'BYE' }]]);
  assert.deepEqual(
    host.requests.map((r) => [r.endpoint, r.row]),
    [
      ['llm', 0],
      ['llm', 1],
    ],
  );
  assert.deepEqual(host.requestBodies()[1], { messages: [{ role: 'user', content: 'Shout: bye' }], temperature: 0 });
  assert.deepEqual(host.attached, [
    [0, 'prompt_chars', '5'],
    [1, 'prompt_chars', '3'],
  ]);
  assert.deepEqual(host.logs.slice(0, 2), [
    ['debug', 'shouting row 0'],
    ['debug', 'shouting row 1'],
  ]);
  assert.equal(host.unusedAnswers(), 0);
});

test('status bodies and failures are scripted', () => {
  const host = new MockHost()
    .grant('llm')
    .reply('llm', 429, { error: { message: 'Rate limit reached' } }, { attempts: 3 })
    .fail('llm', 'transport', 'connection reset by peer')
    .fail('llm', 'deadline-exceeded', '429 for 300 s');
  const results = run(Shout, host, {}, [{ text: 'a' }, { text: 'b' }, { text: 'c' }, { text: 'd' }]);
  assert.ok(isRowError(results[0], 'llm_call_failed', 'HTTP 429 after 3 attempts: Rate limit reached'));
  assert.ok(isRowError(results[1], 'llm_call_failed', 'connection reset by peer'));
  assert.ok(isRowError(results[2], 'retry_timeout'));
  // Nothing left in the script: the mock says so rather than inventing an answer.
  assert.ok(isRowError(results[3], 'llm_call_failed') && results[3].message.includes('no answer scripted'));
});

class AskOther extends Transform {
  processRow(row, cx) {
    return row.set('answer', cx.chat('other', new Chat().user('hi')));
  }
}

test('an endpoint not granted is denied', () => {
  const results = run(AskOther, new MockHost().grant('llm').replyChat('other', 'x'), {}, [{}]);
  assert.ok(isRowError(results[0], 'endpoint_denied', 'endpoint `other` is not granted to node `test`'));
});

test('an exception in row code fails that row only', () => {
  const host = new MockHost().grant('llm').replyChat('llm', 'OK');
  const results = run(Shout, host, { failOn: 'bad' }, [{ text: 'bad' }, { text: 'undefined property' }, { text: 'good' }]);
  assert.ok(isRowError(results[0], 'guest_exception', 'Error: boom'), `${results[0]}`);
  assert.ok(isRowError(results[1], 'guest_exception') && results[1].message.startsWith('TypeError: '), `${results[1]}`);
  assert.deepEqual(results[2], [{ text: 'good', loud: 'OK' }]);
  assert.ok(host.logs.some(([, message]) => message.includes('Error: boom') && message.includes('processRow')));
});

test('an exception in configure refuses the options with its message', () => {
  const refusal = (host, options) => {
    try {
      configure(Shout, host, options);
    } catch (e) {
      assert.ok(e instanceof ConfigureError, `${e}`);
      return e.message;
    }
    assert.fail('configure accepted the options');
  };
  // Not about one option: the options as a whole.
  assert.equal(refusal(new MockHost().grant('llm'), { failOn: 'configure' }), 'options: Error: boom at configure');
  assert.equal(refusal(new MockHost().grant('llm'), { failOn: 'string' }), 'options.failOn: refused as a string');
  assert.match(refusal(new MockHost().grant('a', 'b'), {}), /^options.endpoint:/);
  assert.match(refusal(new MockHost().grant('llm'), { colour: 'red' }), /unknown field `colour`/);
});

class Batch extends Transform {
  // Sends every row's request in one call, as a batching node should.
  process(rows, host) {
    if (rows.some((row) => row.get('explode'))) throw new RangeError('the batch exploded');
    const results = host.send(rows.map((row, i) => ({ endpoint: 'llm', body: new Chat().user(row.strField('text')).body(), row: i })));
    return rows.map((row, i) => {
      try {
        return row.set('answer', interpret(results[i]).content);
      } catch (e) {
        return e;
      }
    });
  }
}

test('a batch is sent at once, and an exception fails every row of it', () => {
  const host = new MockHost().grant('llm').replyChat('llm', '1').reply('llm', 400, 'bad');
  const results = run(Batch, host, {}, [{ text: 'a' }, { text: 'b' }]);
  assert.deepEqual(results[0], [{ text: 'a', answer: '1' }]);
  assert.ok(isRowError(results[1], 'llm_call_failed', 'HTTP 400: bad'));
  const exploded = run(Batch, new MockHost().grant('llm'), {}, [{ text: 'a' }, { text: 'b', explode: true }]);
  assert.ok(exploded.every((r) => isRowError(r, 'guest_exception', 'RangeError: the batch exploded')));
});

class Odd extends Transform {
  processRow(row) {
    switch (row.get('mode')) {
      case 'undefined':
        return undefined;
      case 'drop':
        return [];
      case 'two':
        return [row, { copy: true }];
      case 'oom':
        throw 'out of memory';
      default:
        return row;
    }
  }
}

test('what row code returns is checked', () => {
  const results = run(Odd, new MockHost(), {}, [{ mode: 'undefined' }, { mode: 'drop' }, { mode: 'two' }]);
  assert.ok(isRowError(results[0], 'guest_exception') && results[0].message.includes('was `return row` forgotten?'));
  assert.deepEqual(results[1], []);
  assert.deepEqual(results[2], [{ mode: 'two' }, { copy: true }]);
});

test('running out of memory is not turned into a row error', () => {
  // Inside a component this traps, and weir reports the memory limit.
  assert.throws(() => run(Odd, new MockHost(), {}, [{ mode: 'oom' }]), (e) => e === 'out of memory');
});

test('the Anthropic shape is scripted too', () => {
  const host = new MockHost().grant('llm').replyAnthropic('llm', 'LOUD', { usage: { input_tokens: 5, output_tokens: 1 } });
  assert.deepEqual(run(Shout, host, {}, [{ text: 'x' }]), [[{ text: 'x', loud: 'LOUD' }]]);
});

test('complete writes the body weir would and reads the scripted answer', () => {
  const host = new MockHost()
    .grant('llm')
    .replyChat('llm', 'hi', { finishReason: 'length', usage: { prompt_tokens: 3, completion_tokens: 1 }, model: 'm' });
  const [answer] = host.complete([new Chat('m').temperature(0.2).param('seed', 1).user('q').request('llm', 0)]);
  assert.deepEqual(host.requestBodies(), [{ seed: 1, model: 'm', messages: [{ role: 'user', content: 'q' }], temperature: 0.2 }]);
  assert.deepEqual(
    [answer.text, answer.finishReason, answer.inputTokens, answer.outputTokens, answer.model],
    ['hi', 'length', 3, 1, 'm'],
  );
});
