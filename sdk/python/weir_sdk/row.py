"""Rows as a transform sees them: JSON objects, and the error that fails one."""

import json


class RowError(Exception):
    """Why one row failed at this node. Raise it from row code to fail that
    row alone. `code` is stable and machine-readable (users count and filter
    on it); `message` says what went wrong and where."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    def __eq__(self, other):
        return (
            isinstance(other, RowError)
            and (self.code, self.message) == (other.code, other.message)
        )

    def __hash__(self):
        return hash((self.code, self.message))

    def __repr__(self):
        return f"RowError({self.code!r}, {self.message!r})"


class Row(dict):
    """One row: a JSON object whose fields keep their order. It is a dict, so
    `row["x"]` and `row["x"] = 1` work; the helpers fail the row with a
    `missing_field` error that names the field."""

    @classmethod
    def parse(cls, text):
        """Parses a row as the host sends it."""
        try:
            value = json.loads(text)
        except ValueError as e:
            raise RowError("invalid_row", f"the row is not valid JSON: {e}") from None
        if not isinstance(value, dict):
            raise RowError(
                "invalid_row", f"the row is not a JSON object but {kind(value)}"
            )
        return cls(value)

    def str_field(self, field):
        """The text of `field`; fails the row when it is absent or not text."""
        if field not in self:
            raise RowError("missing_field", f"the row has no field `{field}`")
        return self._text(field)

    def optional_str_field(self, field, default=None):
        """The text of `field`, or `default` when it is absent or null; fails
        the row when it holds something other than text."""
        if self.get(field) is None:
            return default
        return self._text(field)

    def field(self, field):
        """The value of `field`, whatever its type; fails the row when absent."""
        if field not in self:
            raise RowError("missing_field", f"the row has no field `{field}`")
        return self[field]

    def set(self, field, value):
        """Sets `field`, keeping its place if it exists, else appending it."""
        self[field] = value
        return self

    def to_json(self):
        # allow_nan=False: NaN is no JSON, and the host would refuse the row.
        return json.dumps(self, ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    def _text(self, field):
        value = self[field]
        if not isinstance(value, str):
            raise RowError("missing_field", f"field `{field}` is {kind(value)}, not text")
        return value


def kind(value):
    """How a JSON value is named in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
