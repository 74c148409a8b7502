// Run by component.test.js under `--conditions=weir`, so `#host` is the
// contract's imports (served by fake-wit-hooks.js), as in a component.
import { Chat, ConfigureError, Transform, exportTransform } from 'weir-sdk';

globalThis.fakeWeir = {
  endpoints: ['llm'],
  attached: [],
  logs: [],
  sent: [],
  complete(requests) {
    this.sent.push(...requests);
    return requests.map((r) => {
      const asked = r.messages.at(-1).content;
      if (asked === 'reset') return { tag: 'err', val: { tag: 'call', val: { tag: 'transport', val: 'connection reset' } } };
      if (asked === 'slow') return { tag: 'err', val: { tag: 'call', val: { tag: 'deadline-exceeded', val: '429 for 300 s' } } };
      const body = '{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}';
      return {
        tag: 'ok',
        val: { text: 'hi', finishReason: 'stop', usage: undefined, model: undefined, status: 200, attempts: 1, latencyMs: 3, body },
      };
    });
  },
  send(requests) {
    this.sent.push(...requests);
    return requests.map((r) =>
      r.body.includes('reset')
        ? { tag: 'err', val: { tag: 'transport', val: 'connection reset' } }
        : r.body.includes('slow')
          ? { tag: 'err', val: { tag: 'deadline-exceeded', val: '429 for 300 s' } }
          : { tag: 'ok', val: { status: 200, body: '{"choices":[{"message":{"content":"hi"}}]}', attempts: 1, latencyMs: 3 } },
    );
  },
};

class Ask extends Transform {
  constructor(options, node) {
    super(options, node);
    if (options.boolean('explode', false)) throw new TypeError('exploded');
    if (options.has('bad')) throw new ConfigureError('options.bad: not allowed');
    if (options.has('params')) throw new ConfigureError('must be at most 2', ['params', 'temperature']);
    this.endpoint = node.endpoint();
  }
  outputFields() {
    return ['answer'];
  }
  processRow(row, cx) {
    if (row.get('boom')) throw new Error('boom');
    cx.attach('k', 'v');
    cx.log('info', 'asked');
    return row.set('answer', cx.chat(this.endpoint, new Chat().user(row.strField('q'))));
  }
}

const transform = exportTransform(Ask);
const report = { beforeConfigure: transform.process(['{}']) };
for (const options of ['{"explode":true}', '{"bad":1}', '{"params":{"temperature":3}}']) {
  try {
    transform.configure(options);
  } catch (e) {
    (report.refusals ??= []).push(e);
  }
}
report.configured = transform.configure('{}');
report.outcomes = transform.process(['{"boom":true}', '{"q":"reset"}', '{"q":"slow"}', '{"q":"fine"}', '[1]']);
report.sent = globalThis.fakeWeir.sent;
report.attached = globalThis.fakeWeir.attached;
report.logs = globalThis.fakeWeir.logs.filter(([level]) => level === 'info');
process.stdout.write(JSON.stringify(report));
