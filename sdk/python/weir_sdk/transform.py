"""The class a transform subclasses, what it is handed while it works, and
the glue that turns its results and exceptions into what the contract
carries. The same glue serves the component (weir_sdk.component) and the
mock host (weir_sdk.testing), so a unit test sees what weir would."""

import json
import traceback

from . import chat as chat_module
from .host import CallError, ChatError, Request, check_level
from .options import ConfigureError, Options
from .row import Row, RowError

GUEST_EXCEPTION = "guest_exception"


class Transform:
    """A transform node. One object is made per component instance, from the
    node's options, and then processes many calls of rows.

    Subclasses override:
    - `__init__(self, options, node)`: checks `options` (an `Options`) and
      keeps the settings; raise `ConfigureError("options.NAME: ...")` to
      refuse them. `node` is a `NodeCx`.
    - `output_fields(self)`: the fields this node adds, in order.
    - `process_row(self, row, cx)`: returns the row (a `Row`), a list of
      rows (none drops the row, several expand it), or raises `RowError` to
      fail this row alone. Any other exception fails the row too, with code
      `guest_exception`.
    - optionally `process(self, rows, host)`, to send every row's requests
      of a call in one concurrent `host.send`.
    """

    def __init__(self, options, node):
        self.options = options
        self.node = node

    def output_fields(self):
        return []

    def process_row(self, row, cx):
        raise NotImplementedError(f"{type(self).__name__} does not implement process_row")

    def process(self, rows, host):
        """One result per row, in order: its output rows, or the exception
        that failed it. The default handles the rows one by one."""
        results = []
        for index, row in enumerate(rows):
            try:
                results.append(self.process_row(row, RowCx(host, index)))
            except MemoryError:
                raise
            except Exception as e:
                results.append(e)
        return results


class NodeCx:
    """What a node knows about itself while it is configured."""

    def __init__(self, name, endpoints):
        self.name = name
        """The node's name in the pipeline file."""
        self.endpoints = list(endpoints)
        """The granted endpoints, in the pipeline file's order."""

    def endpoint(self, chosen=None):
        """The endpoint to use: `chosen` if given and granted, else the only
        granted one. The error is phrased for `options.endpoint`."""
        granted = ", ".join(self.endpoints) or "none"
        if chosen is not None:
            if chosen in self.endpoints:
                return chosen
            raise ConfigureError(
                f"options.endpoint: `{chosen}` is not granted to node `{self.name}` "
                f"(granted: {granted})"
            )
        if len(self.endpoints) == 1:
            return self.endpoints[0]
        raise ConfigureError(
            f"options.endpoint: node `{self.name}` is granted {len(self.endpoints)} endpoints "
            f"({granted}); name the one to use"
        )


class RowCx:
    """The host, seen from one row of the current call: requests and audit
    entries are filed under this row."""

    def __init__(self, host, index):
        self.host = host
        self.index = index
        """This row's index within the current call."""

    def send(self, endpoint, body):
        """Sends one request (a body as JSON text or a dict); returns the
        `Response` or the `CallError`."""
        if not isinstance(body, str):
            body = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        results = self.host.send([Request(endpoint=endpoint, body=body, row=self.index)])
        if not results:
            return CallError("transport", "the host returned no result")
        return results[0]

    def complete(self, endpoint, chat):
        """Sends a `Chat` in the typed shape (the host writes the provider's
        body); returns the `ChatAnswer` or the `ChatError`."""
        results = self.host.complete([chat.request(endpoint, self.index)])
        if not results:
            return ChatError("call", "the host returned no result", CallError("transport", "the host returned no result"))
        return results[0]

    def ask(self, endpoint, chat):
        """Sends a chat request (a `Chat`, or a raw body sent as it is);
        returns the `Answer` or raises its `RowError`."""
        if isinstance(chat, chat_module.Chat):
            return chat_module.interpret_completed(self.complete(endpoint, chat))
        return chat_module.interpret(self.send(endpoint, chat))

    def chat(self, endpoint, chat):
        """Sends a chat request; returns the model's text or raises its `RowError`."""
        return self.ask(endpoint, chat).content

    def chat_json(self, endpoint, chat):
        """Sends a chat request; returns the JSON the answer holds."""
        return self.ask(endpoint, chat).json()

    def attach(self, key, value):
        """Adds a fact to this row's record in the audit trail."""
        self.host.attach(self.index, key, str(value))

    def log(self, level, message):
        self.host.log(check_level(level), message)


def configure_node(cls, options_text, host):
    """Makes the node from its options as the host sends them. Returns
    `(node, output_fields)`, or raises `ConfigureError` with the message weir
    shows; any exception of the author's code becomes one, so a bad option or
    a bug refuses the node instead of trapping."""
    try:
        values = json.loads(options_text)
    except ValueError as e:
        raise ConfigureError(f"options: not valid JSON: {e}") from None
    try:
        node = cls(Options(values), NodeCx(host.node_name(), host.endpoints()))
        fields = node.output_fields()
        if not isinstance(fields, (list, tuple)) or not all(isinstance(f, str) for f in fields):
            raise TypeError("output_fields must return a list of field names")
    except (ConfigureError, MemoryError):
        raise
    except Exception as e:
        host.log("debug", f"configure raised:\n{traceback.format_exc()}")
        raise ConfigureError(describe(e)) from e
    return node, list(fields)


def process_rows(node, texts, host):
    """One result per row text: the output rows as JSON text, or the
    `RowError` that failed the row. An exception fails its row (or, raised
    from `process` itself, every row of the call) with code
    `guest_exception`; MemoryError is left to trap, as the host must see it."""
    rows, results = [], [None] * len(texts)
    for index, text in enumerate(texts):
        try:
            rows.append(Row.parse(text))
        except RowError as e:
            results[index] = e
    if any(r is not None for r in results):
        # A row the host sent is not an object: handle the others one by one.
        for index, text in enumerate(texts):
            if results[index] is None:
                results[index] = _one(node, Row.parse(text), index, host)
        return [_to_texts(r, host) for r in results]
    try:
        outputs = node.process(rows, host)
        if not isinstance(outputs, (list, tuple)) or len(outputs) != len(rows):
            raise TypeError(
                f"process must return one result per row ({len(rows)}), "
                f"not {_count(outputs)}"
            )
    except MemoryError:
        raise
    except Exception as e:
        error = _row_error(e, host)
        return [error] * len(rows)
    return [_to_texts(output, host) for output in outputs]


def _one(node, row, index, host):
    try:
        return node.process_row(row, RowCx(host, index))
    except MemoryError:
        raise
    except Exception as e:
        return e


def _to_texts(output, host):
    """The JSON texts of one row's result, or its RowError."""
    if isinstance(output, BaseException):
        return _row_error(output, host)
    try:
        if isinstance(output, dict):
            output = [output]
        if not isinstance(output, (list, tuple)) or not all(isinstance(r, dict) for r in output):
            hint = "; was `return row` forgotten?" if output is None else ""
            raise TypeError(
                f"a row's result must be a row or a list of rows, not {_count(output)}{hint}"
            )
        return [Row(r).to_json() for r in output]
    except MemoryError:
        raise
    except Exception as e:
        return _row_error(e, host)


def _row_error(exception, host):
    if isinstance(exception, MemoryError):
        raise exception
    if isinstance(exception, RowError):
        return exception
    host.log(
        "debug",
        "".join(traceback.format_exception(type(exception), exception, exception.__traceback__)),
    )
    return RowError(GUEST_EXCEPTION, describe(exception))


def describe(exception):
    """`ValueError: boom`: the exception's type and message."""
    message = str(exception)
    name = type(exception).__name__
    return f"{name}: {message}" if message else name


def _count(value):
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)):
        return f"{len(value)} results"
    return type(value).__name__
