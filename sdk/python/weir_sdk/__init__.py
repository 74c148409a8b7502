"""Write weir transforms in Python.

A transform is one node of a weir pipeline: it receives rows (JSON objects),
may call the endpoints the pipeline grants it, and returns output rows or a
row error. Subclass `Transform`, export it from `app.py` with
`Transform = weir_sdk.export(MyTransform)`, and build with
`weir guest build`. Unit-test the same class natively with
`weir_sdk.testing.MockHost` and pytest.
"""

from .chat import Answer, Chat, answer, interpret, interpret_completed, parse_answer
from .component import export
from .host import CallError, ChatAnswer, ChatError, ChatRequest, Host, Request, Response
from .json_answer import extract_json
from .options import ConfigureError, Options
from .row import Row, RowError
from .transform import GUEST_EXCEPTION, NodeCx, RowCx, Transform

CONTRACT_VERSION = "0.3.0"
"""The version of the `weir:transform` contract this SDK builds against."""

__all__ = [
    "Answer",
    "CallError",
    "Chat",
    "ChatAnswer",
    "ChatError",
    "ChatRequest",
    "ConfigureError",
    "CONTRACT_VERSION",
    "GUEST_EXCEPTION",
    "Host",
    "NodeCx",
    "Options",
    "Request",
    "Response",
    "Row",
    "RowCx",
    "RowError",
    "Transform",
    "answer",
    "export",
    "extract_json",
    "interpret",
    "interpret_completed",
    "parse_answer",
]
