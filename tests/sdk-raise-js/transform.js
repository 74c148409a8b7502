// A test tool: a transform on weir-sdk that throws where a row or its
// options ask it to, so CI can check, through the real host, that an
// exception fails its row (or refuses the options) instead of trapping, and
// that running out of memory still traps.
//
// A row's `action`: `ok` (adds done: yes), `raise` (throws an Error),
// `row_error` (throws a RowError), `oom` (allocates until memory runs out).
// Option `raise_in_configure`: configure throws an Error with that message.

import { RowError, Transform, exportTransform } from 'weir-sdk';

export class Raise extends Transform {
  constructor(options, node) {
    super(options, node);
    options.refuseUnknown('raise_in_configure');
    const message = options.text('raise_in_configure', undefined);
    if (message !== undefined) throw new Error(message);
  }

  outputFields() {
    return ['done'];
  }

  processRow(row) {
    switch (row.strField('action')) {
      case 'raise':
        throw new Error('boom');
      case 'row_error':
        throw new RowError('my_code', 'as asked');
      case 'oom': {
        const hoard = [];
        for (;;) hoard.push(new Array(1 << 20).fill(hoard.length));
      }
      default:
        return row.set('done', 'yes');
    }
  }
}

export const transform = exportTransform(Raise);
