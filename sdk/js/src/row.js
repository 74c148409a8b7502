// Rows as a transform sees them: JSON objects, and the error that fails one.

/**
 * Why one row failed at this node. Throw it from row code to fail that row
 * alone. `code` is stable and machine-readable (users count and filter on
 * it); `message` says what went wrong and where.
 */
export class RowError extends Error {
  constructor(code, message) {
    super(message);
    this.name = 'RowError';
    this.code = code;
  }
}

/**
 * One row: a JSON object whose fields keep their order, in `fields`. The
 * helpers fail the row with a `missing_field` error that names the field.
 */
export class Row {
  constructor(fields = {}) {
    this.fields = fields;
  }

  /** Parses a row as the host sends it. */
  static parse(text) {
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      throw new RowError('invalid_row', `the row is not valid JSON: ${e.message}`);
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new RowError('invalid_row', `the row is not a JSON object but ${kind(value)}`);
    }
    return new Row(value);
  }

  has(field) {
    return Object.prototype.hasOwnProperty.call(this.fields, field);
  }

  /** The value of `field`, or undefined. */
  get(field) {
    return this.has(field) ? this.fields[field] : undefined;
  }

  /** The value of `field`, whatever its type; fails the row when absent. */
  field(field) {
    if (!this.has(field)) throw new RowError('missing_field', `the row has no field \`${field}\``);
    return this.fields[field];
  }

  /** The text of `field`; fails the row when it is absent or not text. */
  strField(field) {
    return text(field, this.field(field));
  }

  /** The text of `field`, or `fallback` when it is absent or null; fails the
   * row when it holds something other than text. */
  optionalStrField(field, fallback = undefined) {
    const value = this.get(field);
    return value === undefined || value === null ? fallback : text(field, value);
  }

  /** Sets `field`, keeping its place if it exists, else appending it. */
  set(field, value) {
    // defineProperty: a field named `__proto__` stays a field.
    Object.defineProperty(this.fields, field, { value, enumerable: true, writable: true, configurable: true });
    return this;
  }

  toJSON() {
    return this.fields;
  }
}

function text(field, value) {
  if (typeof value !== 'string') {
    throw new RowError('missing_field', `field \`${field}\` is ${kind(value)}, not text`);
  }
  return value;
}

/** How a JSON value is named in messages. */
export function kind(value) {
  if (value === null || value === undefined) return 'null';
  if (Array.isArray(value)) return 'an array';
  switch (typeof value) {
    case 'boolean':
      return 'a boolean';
    case 'number':
      return 'a number';
    case 'string':
      return 'text';
    case 'object':
      return 'an object';
    default:
      return typeof value;
  }
}
