"""A node's options, checked at configure. Every refusal is a
`ConfigureError` that names the option by its path, so weir points at that
option's line in the pipeline file."""

import re

from .row import kind

_NAMED = re.compile(r"options\.([A-Za-z0-9_.\[\]-]+?)(?::\s*|\s+|$)(.*)", re.S)
_UNKNOWN = re.compile(r"unknown field `([^`]+)`")


class ConfigureError(Exception):
    """Refuses the node's options.

    `path` is the option's path of keys (`["params", "temperature"]`; empty
    for the options as a whole) and `detail` what is wrong with it. Given no
    path, a message written as weir shows refusals (`options.NAME: ...`, or
    naming "unknown field `NAME`") gives it. `message` is the refusal as weir
    shows it: `options.params.temperature: must be at most 2`."""

    def __init__(self, message, path=None):
        if path is None:
            path, message = _path_of(message)
        self.path = [str(key) for key in path]
        self.detail = message
        self.message = _shown(self.path, message)
        super().__init__(self.message)


def _path_of(text):
    named = _NAMED.fullmatch(text)
    if named:
        keys = [k for k in re.split(r"[.\[\]]", named.group(1)) if k]
        return keys, named.group(2)
    if text.startswith("options:"):
        text = text[len("options:"):].strip()
    unknown = _UNKNOWN.search(text)
    return ([unknown.group(1)] if unknown else []), text


def _shown(path, detail):
    shown = "options" + "".join(f"[{k}]" if k.isdigit() else f".{k}" for k in path)
    return f"{shown}: {detail}"


REQUIRED = object()
"""The default of an option that must be given."""


class Options:
    """The node's `options:` from the pipeline file, with typed getters.

    A getter called without a default reads a required option; with one
    (`None` included), an optional one."""

    def __init__(self, values):
        if values is None:
            values = {}
        if not isinstance(values, dict):
            raise ConfigureError(f"options: expected a mapping of options, got {kind(values)}")
        self.values = values

    def refuse_unknown(self, *known):
        """Refuses any option not named in `known`."""
        unknown = sorted(set(self.values) - set(known))
        if unknown:
            expected = ", ".join(f"`{name}`" for name in known) or "none"
            raise ConfigureError(
                f"options: unknown field `{unknown[0]}`, expected one of {expected}"
            )
        return self

    def __contains__(self, name):
        return name in self.values

    def value(self, name, default=REQUIRED):
        """The option as given, any JSON."""
        if self.values.get(name) is None:
            if default is REQUIRED:
                raise ConfigureError(f"options.{name}: this option is required")
            return default
        return self.values[name]

    def text(self, name, default=REQUIRED, non_empty=False):
        value = self._typed(name, default, lambda v: isinstance(v, str), "text")
        if non_empty and value is not None and not value.strip():
            raise ConfigureError(f"options.{name}: give a non-empty text")
        return value

    def text_list(self, name, default=REQUIRED, non_empty=False):
        value = self._typed(
            name,
            default,
            lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
            "a list of text",
        )
        if non_empty and value is not None and not value:
            raise ConfigureError(f"options.{name}: give at least one")
        return value

    def integer(self, name, default=REQUIRED, min=None, max=None):
        value = self._typed(
            name, default, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"
        )
        return self._in_range(name, value, min, max)

    def number(self, name, default=REQUIRED, min=None, max=None):
        value = self._typed(
            name,
            default,
            lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "a number",
        )
        return self._in_range(name, value, min, max)

    def boolean(self, name, default=REQUIRED):
        return self._typed(name, default, lambda v: isinstance(v, bool), "true or false")

    def one_of(self, name, allowed, default=REQUIRED):
        value = self.text(name, default)
        if value is not None and value not in allowed:
            raise ConfigureError(
                f"options.{name}: `{value}` is not one of {', '.join(allowed)}"
            )
        return value

    def _typed(self, name, default, is_type, expected):
        value = self.value(name, default)
        if name in self.values and self.values[name] is not None and not is_type(value):
            raise ConfigureError(f"options.{name}: expected {expected}, got {kind(value)}")
        return value

    @staticmethod
    def _in_range(name, value, low, high):
        if value is None:
            return value
        if low is not None and value < low:
            raise ConfigureError(f"options.{name}: {value} is below the least allowed, {low}")
        if high is not None and value > high:
            raise ConfigureError(f"options.{name}: {value} is above the most allowed, {high}")
        return value
