// A node's options, checked at configure. Every refusal is a ConfigureError
// that names the option by its path, so weir points at that option's line in
// the pipeline file.

import { kind } from './row.js';

/**
 * Refuses the node's options. `path` is the option's path of keys
 * (`['params', 'temperature']`; empty for the options as a whole) and
 * `detail` what is wrong with it. Given no path, a message written as weir
 * shows refusals (`options.NAME: ...`, or naming "unknown field `NAME`")
 * gives it. `message` is the refusal as weir shows it:
 * `options.params.temperature: must be at most 2`.
 */
export class ConfigureError extends Error {
  constructor(message, path = undefined) {
    const [keys, detail] = path === undefined ? pathOf(String(message)) : [path.map(String), message];
    super(shown(keys, detail));
    this.name = 'ConfigureError';
    this.path = keys;
    this.detail = detail;
  }
}

function pathOf(text) {
  const named = /^options\.([A-Za-z0-9_.[\]-]+?)(?::\s*|\s+|$)([\s\S]*)$/.exec(text);
  if (named) return [named[1].split(/[.[\]]/).filter((k) => k !== ''), named[2]];
  const detail = text.startsWith('options:') ? text.slice('options:'.length).trim() : text;
  const unknown = /unknown field `([^`]+)`/.exec(detail);
  return [unknown ? [unknown[1]] : [], detail];
}

function shown(path, detail) {
  return `options${path.map((k) => (/^\d+$/.test(k) ? `[${k}]` : `.${k}`)).join('')}: ${detail}`;
}

/** The fallback of an option that must be given. */
export const REQUIRED = Symbol('required');

/**
 * The node's `options:` from the pipeline file, with typed getters. A getter
 * called without a fallback reads a required option; with one (undefined
 * included, e.g. `options.text('model', undefined)`), an optional one.
 */
export class Options {
  constructor(values) {
    if (values === null || values === undefined) values = {};
    if (typeof values !== 'object' || Array.isArray(values)) {
      throw new ConfigureError(`options: expected a mapping of options, got ${kind(values)}`);
    }
    this.values = values;
  }

  /** Refuses any option not named in `known`. */
  refuseUnknown(...known) {
    const unknown = Object.keys(this.values)
      .filter((name) => !known.includes(name))
      .sort();
    if (unknown.length > 0) {
      const expected = known.map((name) => `\`${name}\``).join(', ') || 'none';
      throw new ConfigureError(`options: unknown field \`${unknown[0]}\`, expected one of ${expected}`);
    }
    return this;
  }

  has(name) {
    return Object.prototype.hasOwnProperty.call(this.values, name);
  }

  /** The option as given, any JSON. */
  value(name, ...fallback) {
    const given = this.has(name) ? this.values[name] : undefined;
    if (given === undefined || given === null) {
      if (fallback.length === 0 || fallback[0] === REQUIRED) {
        throw new ConfigureError(`options.${name}: this option is required`);
      }
      return fallback[0];
    }
    return given;
  }

  text(name, ...fallback) {
    return this.#typed(name, fallback, (v) => typeof v === 'string', 'text');
  }

  textList(name, ...fallback) {
    return this.#typed(
      name,
      fallback,
      (v) => Array.isArray(v) && v.every((x) => typeof x === 'string'),
      'a list of text',
    );
  }

  /** A list of text with at least one entry. */
  nonEmptyTextList(name, ...fallback) {
    const value = this.textList(name, ...fallback);
    if (Array.isArray(value) && value.length === 0) {
      throw new ConfigureError(`options.${name}: give at least one`);
    }
    return value;
  }

  /** An integer; after the fallback, `{ min, max }` bound it
   * (`options.integer('n', REQUIRED, { min: 1 })` for a required one). */
  integer(name, ...args) {
    const [fallback, { min, max } = {}] = splitArgs(args);
    return this.#inRange(name, this.#typed(name, fallback, Number.isInteger, 'an integer'), min, max);
  }

  /** A finite number; after the fallback, `{ min, max }` bound it. */
  number(name, ...args) {
    const [fallback, { min, max } = {}] = splitArgs(args);
    const isNumber = (v) => typeof v === 'number' && Number.isFinite(v);
    return this.#inRange(name, this.#typed(name, fallback, isNumber, 'a number'), min, max);
  }

  boolean(name, ...fallback) {
    return this.#typed(name, fallback, (v) => typeof v === 'boolean', 'true or false');
  }

  oneOf(name, allowed, ...fallback) {
    const value = this.text(name, ...fallback);
    if (typeof value === 'string' && !allowed.includes(value)) {
      throw new ConfigureError(`options.${name}: \`${value}\` is not one of ${allowed.join(', ')}`);
    }
    return value;
  }

  #typed(name, fallback, isType, expected) {
    const value = this.value(name, ...fallback);
    const given = this.has(name) && this.values[name] !== null && this.values[name] !== undefined;
    if (given && !isType(value)) {
      throw new ConfigureError(`options.${name}: expected ${expected}, got ${kind(value)}`);
    }
    return value;
  }

  #inRange(name, value, min, max) {
    if (typeof value !== 'number') return value;
    if (min !== undefined && value < min) {
      throw new ConfigureError(`options.${name}: ${value} is below the least allowed, ${min}`);
    }
    if (max !== undefined && value > max) {
      throw new ConfigureError(`options.${name}: ${value} is above the most allowed, ${max}`);
    }
    return value;
  }
}

/** `[fallback list, limits]` of a numeric getter's arguments. */
function splitArgs(args) {
  return [args.length > 0 ? [args[0]] : [], args[1]];
}
