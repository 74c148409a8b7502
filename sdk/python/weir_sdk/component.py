"""The component side: the host as the contract's imports, and the class
componentize-py exports. Put this in `app.py`:

    Transform = weir_sdk.export(MyTransform)

The imports exist only inside a component build (componentize-py generates
`wit_world`); natively this module still imports, so the same `app.py`
unit-tests with `weir_sdk.testing`.
"""

import json

from .host import CallError, ChatAnswer, ChatError, Response
from .options import ConfigureError
from .row import RowError
from .transform import configure_node, process_rows

try:
    from componentize_py_types import Err
    from wit_world.exports import Transform as ExportBase
    from wit_world.exports.transform import (
        ConfigError,
        NodeInfo,
        Outcome_Failed,
        Outcome_Rows,
    )
    from wit_world.imports import audit, chat, context, executor, log
    from wit_world.imports import types as wit_types

    IN_COMPONENT = True
except ImportError:
    ExportBase = object
    IN_COMPONENT = False


class WitHost:
    """The host as the contract's imports."""

    def send(self, requests):
        wit_requests = [
            executor.Request(endpoint=r.endpoint, body=r.body, row=r.row) for r in requests
        ]
        return [_result(r) for r in executor.send(wit_requests)]

    def complete(self, requests):
        wit_requests = [
            chat.ChatRequest(
                endpoint=r.endpoint,
                row=r.row,
                messages=[chat.Message(role=m["role"], content=m["content"]) for m in r.messages],
                model=r.model,
                max_tokens=r.max_tokens,
                temperature=None if r.temperature is None else float(r.temperature),
                response_format=_json_text(r.response_format),
                extra=_json_text(r.extra),
            )
            for r in requests
        ]
        return [_chat_result(r) for r in chat.complete(wit_requests)]

    def attach(self, row, key, value):
        audit.attach(row, key, value)

    def log(self, level, message):
        log.log(getattr(log.Level, level.upper()), message)

    def node_name(self):
        return context.node_name()

    def endpoints(self):
        return list(context.endpoints())


def _response(r):
    return Response(status=r.status, body=r.body, attempts=r.attempts, latency_ms=r.latency_ms)


def _result(result):
    if not isinstance(result, Err):
        return _response(result.value)
    error = result.value
    if isinstance(error, executor.CallError_Status):
        return CallError("status", f"HTTP {error.value.status}", _response(error.value))
    kind = {
        executor.CallError_Denied: "denied",
        executor.CallError_DeadlineExceeded: "deadline_exceeded",
    }.get(type(error), "transport")
    return CallError(kind, str(error.value))


def _json_text(value):
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _chat_result(result):
    if not isinstance(result, Err):
        a = result.value
        usage = a.usage
        return ChatAnswer(
            text=a.text,
            finish_reason=a.finish_reason,
            input_tokens=None if usage is None else usage.input_tokens,
            output_tokens=None if usage is None else usage.output_tokens,
            model=a.model,
            status=a.status,
            attempts=a.attempts,
            latency_ms=a.latency_ms,
            body=a.body,
        )
    error = result.value
    if isinstance(error, chat.ChatError_Call):
        failed = _result(Err(error.value))
        return ChatError("call", str(failed), call_error=failed)
    if isinstance(error, chat.ChatError_Unreadable):
        return ChatError("unreadable", response=_response(error.value))
    return ChatError("invalid_request", str(error.value))


def export(transform_class):
    """The class componentize-py exports as the `weir:transform` contract,
    running `transform_class` (a `weir_sdk.Transform`)."""
    # componentize-py makes a new export object for every call, so the node
    # lives here, once per component instance.
    state = {}

    class Export(ExportBase):
        def configure(self, options):
            host = WitHost()
            try:
                node, fields = configure_node(transform_class, options, host)
            except ConfigureError as e:
                raise Err(ConfigError(path=e.path, message=e.detail)) from None
            state["node"] = node
            return NodeInfo(output_fields=fields)

        def process(self, rows):
            node = state.get("node")
            if node is None:
                failure = RowError("not_configured", "process was called before configure")
                return [_outcome(failure) for _ in rows]
            return [_outcome(r) for r in process_rows(node, rows, WitHost())]

    Export.__name__ = Export.__qualname__ = "Transform"
    return Export


def _outcome(result):
    if isinstance(result, RowError):
        return Outcome_Failed(wit_types.RowError(code=result.code, message=result.message))
    return Outcome_Rows(result)
