import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigureError, NodeCx, Options, REQUIRED, Row, RowError } from '../src/index.js';

function refusal(call) {
  try {
    call();
  } catch (e) {
    assert.ok(e instanceof ConfigureError, `${e}`);
    return e.message;
  }
  assert.fail('the options were accepted');
}

test('a refusal names its option by path, read from text written as weir shows it', () => {
  const nested = new ConfigureError('options.params.temperature: must be at most 2');
  assert.deepEqual([nested.path, nested.detail], [['params', 'temperature'], 'must be at most 2']);
  assert.equal(new ConfigureError('must not be empty', ['labels', 2]).message, 'options.labels[2]: must not be empty');
  const whole = new ConfigureError('options: expected a mapping');
  assert.deepEqual([whole.path, whole.message], [[], 'options: expected a mapping']);
});

test('unknown options are refused by name', () => {
  const message = refusal(() => new Options({ labels: [], colour: 1 }).refuseUnknown('labels', 'field'));
  assert.match(message, /^options.colour: unknown field `colour`/);
  new Options({ labels: [] }).refuseUnknown('labels', 'field');
});

test('required options and fallbacks', () => {
  const options = new Options({ labels: ['a'], n: 3, t: 0.5, b: true, model: null });
  assert.deepEqual(options.nonEmptyTextList('labels'), ['a']);
  assert.equal(options.text('field', 'text'), 'text');
  assert.equal(options.text('model', undefined), undefined);
  assert.equal(options.integer('n', REQUIRED, { min: 1 }), 3);
  assert.equal(options.number('t', 1, { max: 2 }), 0.5);
  assert.equal(options.boolean('b'), true);
  assert.equal(refusal(() => options.text('missing')), 'options.missing: this option is required');
  assert.equal(refusal(() => options.integer('missing', REQUIRED, { min: 1 })), 'options.missing: this option is required');
});

test('typed getters name the option and what was wrong', () => {
  const options = new Options({ labels: 'a', n: '3', flag: 1, mode: 'x', empty: [], low: 0 });
  assert.equal(refusal(() => options.textList('labels')), 'options.labels: expected a list of text, got text');
  assert.equal(refusal(() => options.integer('n')), 'options.n: expected an integer, got text');
  assert.equal(refusal(() => options.boolean('flag')), 'options.flag: expected true or false, got a number');
  assert.match(refusal(() => options.oneOf('mode', ['a', 'b'])), /^options.mode: `x` is not one of a, b/);
  assert.equal(refusal(() => options.nonEmptyTextList('empty')), 'options.empty: give at least one');
  assert.match(refusal(() => options.integer('low', REQUIRED, { min: 1 })), /^options.low: 0 is below/);
  assert.match(refusal(() => new Options([1])), /^options: expected a mapping/);
});

test('the endpoint is the chosen or the only one', () => {
  assert.equal(new NodeCx('tag', ['llm']).endpoint(), 'llm');
  assert.equal(new NodeCx('tag', ['a', 'b']).endpoint('b'), 'b');
  const message = refusal(() => new NodeCx('tag', ['a', 'b']).endpoint());
  assert.ok(message.startsWith('options.endpoint:') && message.includes('a, b'), message);
  assert.match(refusal(() => new NodeCx('tag', []).endpoint('x')), /granted: none/);
});

test('fields are read and set in order', () => {
  const row = Row.parse('{"id":1,"text":"hi","note":null}');
  assert.equal(row.strField('text'), 'hi');
  assert.equal(row.optionalStrField('note'), undefined);
  assert.equal(row.optionalStrField('absent', 'd'), 'd');
  assert.throws(() => row.strField('id'), (e) => e instanceof RowError && e.code === 'missing_field' && e.message === 'field `id` is a number, not text');
  assert.throws(() => row.strField('nope'), (e) => e.code === 'missing_field' && e.message === 'the row has no field `nope`');
  assert.throws(() => row.optionalStrField('id'), (e) => e.code === 'missing_field');
  row.set('out', 'x');
  assert.equal(JSON.stringify(row), '{"id":1,"text":"hi","note":null,"out":"x"}');
  assert.throws(() => Row.parse('[1]'), (e) => e.code === 'invalid_row');
  // A field named __proto__ stays a field.
  const odd = Row.parse('{"__proto__":"x"}').set('__proto__', 'y');
  assert.equal(JSON.stringify(odd), '{"__proto__":"y"}');
});
