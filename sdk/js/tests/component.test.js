// The export glue, run as inside a component: `--conditions=weir` makes
// `#host` the contract's imports, served by stand-ins, so the conversions
// to and from the contract's shapes are checked without a wasm build.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

function runScript() {
  const out = execFileSync(
    process.execPath,
    ['--conditions=weir', '--import', here('./support/register-fake-wit.js'), here('./support/component-script.js')],
    { encoding: 'utf8' },
  );
  return JSON.parse(out);
}

test('inside a component, exceptions become row errors and configure errors, not traps', () => {
  const report = runScript();
  assert.deepEqual(report.beforeConfigure, [
    { tag: 'failed', val: { code: 'not_configured', message: 'process was called before configure' } },
  ]);
  // ComponentizeJS returns a thrown value as the `err` of configure's result:
  // a config-error record naming the option by its path.
  assert.deepEqual(report.refusals, [
    { path: [], message: 'TypeError: exploded' },
    { path: ['bad'], message: 'not allowed' },
    { path: ['params', 'temperature'], message: 'must be at most 2' },
  ]);
  assert.deepEqual(report.configured, { outputFields: ['answer'] });
  assert.deepEqual(report.outcomes, [
    { tag: 'failed', val: { code: 'guest_exception', message: 'Error: boom' } },
    { tag: 'failed', val: { code: 'llm_call_failed', message: 'connection reset' } },
    { tag: 'failed', val: { code: 'retry_timeout', message: '429 for 300 s' } },
    { tag: 'rows', val: ['{"q":"fine","answer":"hi"}'] },
    { tag: 'failed', val: { code: 'invalid_row', message: 'the row is not a JSON object but an array' } },
  ]);
  // The chat requests went through `complete`, each under its own row.
  assert.deepEqual(
    report.sent.map((r) => [r.row, r.messages[0].content]),
    [
      [1, 'reset'],
      [2, 'slow'],
      [3, 'fine'],
    ],
  );
  assert.equal(report.attached.length, 3);
  assert.deepEqual(report.logs[0], ['info', 'asked']);
});

test('natively, the export refuses to run without a weir host', async () => {
  const { Transform, exportTransform } = await import('../src/index.js');
  const transform = exportTransform(class extends Transform {});
  assert.throws(() => transform.configure('{}'), /runs inside a weir component/);
});
