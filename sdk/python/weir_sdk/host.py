"""The services a weir host gives a transform: the real imports inside wasm,
`weir_sdk.testing.MockHost` in native tests. Both offer the methods of `Host`."""

from dataclasses import dataclass
from typing import Optional, Protocol, Union

LEVELS = ("trace", "debug", "info", "warn", "error")


@dataclass
class Request:
    """One request to a granted endpoint."""

    endpoint: str
    """The endpoint's name under the node's `endpoints:` in the pipeline file."""
    body: str
    """The request body as JSON text (for `openai` endpoints, a chat-completions body)."""
    row: int = 0
    """The index, within the current `process` call, of the row it is for."""


@dataclass
class Response:
    """The final answer to a request, after the host's retries."""

    status: int
    body: str
    attempts: int = 1
    latency_ms: int = 0


@dataclass
class CallError:
    """Why a request got no successful answer.

    `kind` is one of:
    - `denied`: the endpoint is not granted to this node, or the row index is wrong;
    - `status`: an error status that is not retried, or a retryable one after
      the retries (`response` holds it);
    - `deadline_exceeded`: capacity or transient errors outlasted the retry deadline;
    - `transport`: no connection, or it broke before an answer.
    """

    kind: str
    message: str = ""
    response: Optional[Response] = None

    KINDS = ("denied", "status", "deadline_exceeded", "transport")

    def __post_init__(self):
        if self.kind not in self.KINDS:
            raise ValueError(f"CallError kind `{self.kind}` is not one of {', '.join(self.KINDS)}")

    def __str__(self):
        if self.kind == "status" and self.response is not None:
            return f"HTTP {self.response.status}: {excerpt(self.response.body)}"
        return f"{self.kind.replace('_', ' ')}: {self.message}"


Result = Union[Response, CallError]


@dataclass
class ChatRequest:
    """A chat request in the typed shape: the host writes the provider's body
    (chat completions, or Anthropic Messages for `anthropic` endpoints)."""

    endpoint: str
    messages: "list[dict]"
    """`{"role": ..., "content": ...}` each."""
    row: int = 0
    model: Optional[str] = None
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    response_format: Optional[dict] = None
    """The chat-completions `response_format` object."""
    extra: Optional[dict] = None
    """Further body parameters (`top_p`, `seed`, ...), under the typed fields."""


@dataclass
class ChatAnswer:
    """A chat answer as the host reads it, for every provider alike."""

    text: str
    finish_reason: str
    """`stop`, `length`, `content_filter`, `tool_calls` or `other`."""
    input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    model: Optional[str] = None
    status: int = 200
    attempts: int = 1
    latency_ms: int = 0
    body: str = ""
    """The provider's answer, in the chat-completions shape."""


@dataclass
class ChatError:
    """Why a chat request got no answer. `kind` is one of:
    - `call`: it failed as a `send` request would have (`call_error` holds how);
    - `invalid_request`: it could not be written; nothing was sent;
    - `unreadable`: a successful answer that is not a chat answer (`response`).
    """

    kind: str
    message: str = ""
    call_error: Optional[CallError] = None
    response: Optional[Response] = None

    KINDS = ("call", "invalid_request", "unreadable")

    def __post_init__(self):
        if self.kind not in self.KINDS:
            raise ValueError(f"ChatError kind `{self.kind}` is not one of {', '.join(self.KINDS)}")

    def __str__(self):
        if self.call_error is not None:
            return str(self.call_error)
        if self.response is not None:
            return f"not a chat answer (HTTP {self.response.status}): {excerpt(self.response.body)}"
        return f"{self.kind.replace('_', ' ')}: {self.message}"


ChatResult = Union[ChatAnswer, ChatError]


class Host(Protocol):
    """What a transform can ask of its host."""

    def send(self, requests: "list[Request]") -> "list[Result]":
        """Sends every request concurrently; one result per request, in order."""

    def complete(self, requests: "list[ChatRequest]") -> "list[ChatResult]":
        """Sends typed chat requests concurrently, as `send` does; one result
        per request, in order."""

    def attach(self, row: int, key: str, value: str) -> None:
        """Attaches a named value to row `row`'s record in the audit trail."""

    def log(self, level: str, message: str) -> None:
        """Logs at `level`: trace, debug, info, warn or error."""

    def node_name(self) -> str:
        """The node's name in the pipeline file."""

    def endpoints(self) -> "list[str]":
        """The endpoints granted to the node, in the pipeline file's order."""


def excerpt(text, limit=300):
    """Keeps error messages readable when a body is huge (an HTML error page, say)."""
    return text if len(text) <= limit else text[:limit] + "…"


def check_level(level):
    if level not in LEVELS:
        raise ValueError(f"log level `{level}` is not one of {', '.join(LEVELS)}")
    return level
