"""A scripted host for unit tests of transform logic with pytest: it answers
requests from a script, in order per endpoint, records what the transform
sent, attached and logged, and never touches a network or a wasm build.

    host = MockHost().grant("llm").reply_chat("llm", "shipping")
    results = run(Topic, host, {"labels": ["shipping", "other"]}, [{"text": "Where is my parcel?"}])
    assert results[0] == [{"text": "Where is my parcel?", "topic": "shipping"}]
    assert host.request_bodies()[0]["messages"][1]["content"] == "Where is my parcel?"
"""

import json
from collections import deque

from . import chat
from .complete import over_send
from .host import CallError, Response, check_level
from .transform import configure_node, process_rows
from .row import RowError


class MockHost:
    """A host whose endpoints answer from a script, in order per endpoint."""

    def __init__(self, node_name="test"):
        self._node_name = node_name
        self._endpoints = []
        self._script = {}
        self.requests = []
        """Every `Request` the transform sent, in order."""
        self.attached = []
        """`(row, key, value)` of every audit attachment."""
        self.logs = []
        """`(level, message)` of every log line."""

    def grant(self, *endpoints):
        """Grants `endpoints`, as the node's `endpoints:` would."""
        self._endpoints.extend(endpoints)
        return self

    def answer(self, endpoint, result):
        """Queues a `Response` or `CallError` for the next request to `endpoint`."""
        self._script.setdefault(endpoint, deque()).append(result)
        return self

    def reply(self, endpoint, status, body, attempts=1):
        """Queues an HTTP answer; `body` is text, or any JSON value. A status
        of 400 or more arrives as a `CallError` of kind `status`, as the host
        delivers it."""
        if not isinstance(body, str):
            body = json.dumps(body)
        response = Response(status=status, body=body, attempts=attempts)
        if status >= 400:
            return self.answer(endpoint, CallError("status", f"HTTP {status}", response))
        return self.answer(endpoint, response)

    def reply_chat(self, endpoint, content, **details):
        """Queues an OpenAI-shaped chat answer whose text is `content`
        (`finish_reason`, `usage`, `model` may be given)."""
        return self.reply(endpoint, 200, chat.reply_body(content, **details))

    def reply_anthropic(self, endpoint, text, **details):
        """Queues an Anthropic Messages-shaped answer whose text is `text`
        (`stop_reason`, `usage`, `model` may be given)."""
        return self.reply(endpoint, 200, chat.anthropic_reply_body(text, **details))

    def fail(self, endpoint, kind, message):
        """Queues a failure without an answer: `transport`,
        `deadline_exceeded` or `denied`."""
        return self.answer(endpoint, CallError(kind, message))

    def request_bodies(self):
        """The request bodies, parsed as JSON."""
        bodies = []
        for request in self.requests:
            try:
                bodies.append(json.loads(request.body))
            except ValueError:
                bodies.append(request.body)
        return bodies

    def unused_answers(self):
        """How many scripted answers were never asked for."""
        return sum(len(queue) for queue in self._script.values())

    # The Host methods.

    def send(self, requests):
        results = []
        for request in requests:
            results.append(self._next_answer(request))
            self.requests.append(request)
        return results

    def complete(self, requests):
        """Writes and reads typed chat requests as weir's host does, over
        `send`: the scripted answers serve both."""
        return over_send(self, requests)

    def attach(self, row, key, value):
        self.attached.append((row, key, value))

    def log(self, level, message):
        self.logs.append((check_level(level), message))

    def node_name(self):
        return self._node_name

    def endpoints(self):
        return list(self._endpoints)

    def _next_answer(self, request):
        if request.endpoint not in self._endpoints:
            return CallError(
                "denied",
                f"endpoint `{request.endpoint}` is not granted to node `{self._node_name}`",
            )
        queue = self._script.get(request.endpoint)
        if not queue:
            return CallError(
                "transport",
                f"MockHost has no answer scripted for this request to "
                f"`{request.endpoint}`: {request.body}",
            )
        return queue.popleft()


def configure(transform_class, host, options):
    """The node as weir would configure it with `options` (a dict); raises
    `ConfigureError` with the message weir would show."""
    node, _ = configure_node(transform_class, json.dumps(options), host)
    return node


def run(transform_class, host, options, rows):
    """The results of one `process` call with these options and rows, as the
    real host would make it: configure, then process every row together.

    One result per row: its output rows (a list of dicts) or its `RowError`
    (an exception raised by the row code becomes `guest_exception`). Raises
    `ConfigureError` when the options are refused."""
    node, _ = configure_node(transform_class, json.dumps(options), host)
    texts = [json.dumps(row) for row in rows]
    return [
        r if isinstance(r, RowError) else [json.loads(t) for t in r]
        for r in process_rows(node, texts, host)
    ]
