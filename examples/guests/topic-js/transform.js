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
// else), and the chat codes of weir-sdk (llm_call_failed, retry_timeout,
// endpoint_denied, invalid_response, ...).

import { Chat, ConfigureError, RowError, Transform, exportTransform } from 'weir-sdk';

export class Topic extends Transform {
  constructor(options, node) {
    super(options, node);
    options.refuseUnknown('labels', 'field', 'output', 'model', 'endpoint');
    this.labels = options.textList('labels');
    if (this.labels.length === 0) throw new ConfigureError('options.labels: give at least one label');
    this.field = options.text('field', 'text');
    this.output = options.text('output', 'topic');
    this.model = options.text('model', undefined);
    this.endpoint = node.endpoint(options.text('endpoint', undefined));
    this.systemPrompt = `Classify the text into exactly one of these labels: ${this.labels.join(', ')}. Answer with the label only.`;
  }

  outputFields() {
    return [this.output];
  }

  processRow(row, cx) {
    const text = row.strField(this.field);
    const chat = new Chat(this.model).temperature(0).system(this.systemPrompt).user(text);
    return row.set(this.output, this.label(cx.chat(this.endpoint, chat)));
  }

  /** The configured label the answer names, ignoring case, surrounding space
   * and a final full stop. */
  label(answer) {
    const said = answer.trim().replace(/\.+$/, '').trim().toLowerCase();
    const label = this.labels.find((l) => l.toLowerCase() === said);
    if (label === undefined) {
      throw new RowError(
        'unknown_label',
        `the model answered \`${answer.trim()}\`, which is not one of: ${this.labels.join(', ')}`,
      );
    }
    return label;
  }
}

// The contract's `transform` interface, as ComponentizeJS exports it.
export const transform = exportTransform(Topic);
