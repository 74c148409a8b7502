"""Finding the JSON in what a model wrote."""

import json


def extract_json(answer):
    """The JSON value in an answer: the whole text, else the first fenced
    block (```json ... ```), else the first balanced `{...}` or `[...]` in the
    text (models like to add a sentence before or after). Raises ValueError
    when there is none."""
    trimmed = answer.strip()
    value = _parse(trimmed)
    if value is not _NONE:
        return value
    fenced = _fenced_block(trimmed)
    if fenced is not None:
        value = _parse(fenced.strip())
        if value is not _NONE:
            return value
    for start, char in enumerate(trimmed):
        if char in "{[":
            end = _balanced_end(trimmed, start, char)
            if end is not None:
                value = _parse(trimmed[start:end])
                if value is not _NONE:
                    return value
    raise ValueError("the answer holds no JSON")


_NONE = object()


def _parse(text):
    try:
        return json.loads(text)
    except ValueError:
        return _NONE


def _fenced_block(text):
    start = text.find("```")
    if start < 0:
        return None
    after = text[start + 3 :]
    # Skip the info string (`json`, `JSON`, nothing) up to the line end.
    newline = after.find("\n")
    body = after[newline + 1 :] if newline >= 0 else after
    end = body.find("```")
    return body[:end] if end >= 0 else None


def _balanced_end(text, start, opening):
    """The end of the bracketed text starting at `text[start]`, skipping
    brackets inside strings."""
    closing = "}" if opening == "{" else "]"
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            continue
        if c == '"':
            in_string = True
        elif c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return i + 1
    return None
