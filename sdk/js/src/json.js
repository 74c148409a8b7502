// Finding the JSON in what a model wrote.

const NONE = Symbol('none');

/**
 * The JSON value in an answer: the whole text, else the first fenced block
 * (```json ... ```), else the first balanced `{...}` or `[...]` in the text
 * (models like to add a sentence before or after). Throws when there is none.
 */
export function extractJson(answer) {
  const trimmed = answer.trim();
  let value = parse(trimmed);
  if (value !== NONE) return value;
  const fenced = fencedBlock(trimmed);
  if (fenced !== undefined) {
    value = parse(fenced.trim());
    if (value !== NONE) return value;
  }
  for (let start = 0; start < trimmed.length; start++) {
    const c = trimmed[start];
    if (c !== '{' && c !== '[') continue;
    const end = balancedEnd(trimmed, start, c);
    if (end !== undefined) {
      value = parse(trimmed.slice(start, end));
      if (value !== NONE) return value;
    }
  }
  throw new Error('the answer holds no JSON');
}

function parse(text) {
  try {
    return JSON.parse(text);
  } catch {
    return NONE;
  }
}

function fencedBlock(text) {
  const start = text.indexOf('```');
  if (start < 0) return undefined;
  const after = text.slice(start + 3);
  // Skip the info string (`json`, `JSON`, nothing) up to the line end.
  const newline = after.indexOf('\n');
  const body = newline >= 0 ? after.slice(newline + 1) : after;
  const end = body.indexOf('```');
  return end >= 0 ? body.slice(0, end) : undefined;
}

/** The end of the bracketed text starting at text[start], skipping brackets
 * inside strings. */
function balancedEnd(text, start, opening) {
  const closing = opening === '{' ? '}' : ']';
  let depth = 0;
  let inString = false;
  let escaped = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (c === '\\') escaped = true;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === opening) depth++;
    else if (c === closing) {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return undefined;
}
