"""Chat requests, and their answers turned into text or a row error with a
stable code. Requests are OpenAI chat-completions bodies, which weir's
`openai` and `azure-openai` endpoints take (the host adds the URL and the
key). Answers are read in the OpenAI shape (`choices`) and in the Anthropic
Messages shape (`content` blocks, `stop_reason`).

The row error codes are those of weir's built-in `llm` transform and the Rust
SDK: `llm_call_failed`, `retry_timeout`, `endpoint_denied`,
`invalid_response`, `empty_response`, `response_truncated`,
`content_filtered`, `context_length_exceeded`, and `response_unparsable` for
an answer that should hold JSON and does not.
"""

import json
from dataclasses import dataclass
from typing import Any, Optional

from .host import CallError, ChatAnswer, ChatError, ChatRequest, Response, excerpt
from .json_answer import extract_json
from .row import RowError


class Chat:
    """A chat request. Only what is set is sent, so provider defaults apply.
    Every setter returns the request, so calls chain."""

    def __init__(self, model=None):
        self._model = model
        self._messages = []
        self._temperature = None
        self._max_tokens = None
        self._response_format = None
        self._extra = {}

    def model(self, model):
        """The model to ask; `None` leaves it to the endpoint."""
        self._model = model
        return self

    def system(self, content):
        return self.message("system", content)

    def user(self, content):
        return self.message("user", content)

    def assistant(self, content):
        return self.message("assistant", content)

    def message(self, role, content):
        self._messages.append({"role": role, "content": content})
        return self

    def temperature(self, temperature):
        self._temperature = temperature
        return self

    def max_tokens(self, max_tokens):
        self._max_tokens = max_tokens
        return self

    def json_object(self):
        """Asks for a JSON object answer (`response_format: json_object`)."""
        self._response_format = {"type": "json_object"}
        return self

    def json_schema(self, name, schema, strict=True):
        """Asks for an answer that follows the JSON Schema `schema`."""
        self._response_format = {
            "type": "json_schema",
            "json_schema": {"name": name, "strict": strict, "schema": schema},
        }
        return self

    def param(self, name, value):
        """Any other body parameter (`top_p`, `seed`, `stop`, ...), sent as given."""
        self._extra[name] = value
        return self

    def body_value(self):
        """The request body as a dict."""
        body = {}
        if self._model is not None:
            body["model"] = self._model
        body["messages"] = list(self._messages)
        if self._temperature is not None:
            body["temperature"] = self._temperature
        if self._max_tokens is not None:
            body["max_tokens"] = self._max_tokens
        if self._response_format is not None:
            body["response_format"] = self._response_format
        body.update(self._extra)
        return body

    def request(self, endpoint, row=0):
        """The typed request to `endpoint` for row `row`, for `host.complete`."""
        return ChatRequest(
            endpoint=endpoint,
            row=row,
            messages=[dict(m) for m in self._messages],
            model=self._model,
            max_tokens=self._max_tokens,
            temperature=self._temperature,
            response_format=self._response_format,
            extra=dict(self._extra) or None,
        )

    def body(self):
        """The request body as JSON text."""
        return json.dumps(self.body_value(), ensure_ascii=False, separators=(",", ":"))


@dataclass
class Answer:
    """A successful answer: the model's text and what the provider reported
    about it (`None` where it reported nothing)."""

    content: str
    model: Optional[str] = None
    finish_reason: Optional[str] = None
    """`finish_reason` (OpenAI) or `stop_reason` (Anthropic), as sent."""
    usage: Optional[dict] = None
    """The provider's own `usage` object, as sent."""
    input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    total_tokens: Optional[int] = None

    def json(self):
        """The JSON the answer holds, even inside a ```json fence or a
        sentence; a `response_unparsable` row error when it holds none."""
        try:
            return extract_json(self.content)
        except ValueError as e:
            raise RowError("response_unparsable", f"{e}: {excerpt(self.content)}") from None


def interpret(result):
    """The `Answer` in the final result of a chat request (a `Response` or a
    `CallError`); raises a `RowError` with the code of what went wrong."""
    if isinstance(result, CallError):
        if result.kind == "status" and result.response is not None:
            raise status_error(result.response)
        code = {
            "deadline_exceeded": "retry_timeout",
            "denied": "endpoint_denied",
        }.get(result.kind, "llm_call_failed")
        raise RowError(code, result.message)
    if not 200 <= result.status < 300:
        raise status_error(result)
    return parse_answer(result.body)


def interpret_completed(result):
    """The `Answer` in the result of a typed chat request (a `ChatAnswer` or a
    `ChatError`), with the row error codes of `interpret`."""
    if isinstance(result, ChatError):
        if result.call_error is not None:
            return interpret(result.call_error)
        if result.kind == "invalid_request":
            raise RowError("invalid_request", result.message)
        body = result.response.body if result.response is not None else ""
        raise RowError("invalid_response", f"the answer is not a chat answer: {excerpt(body)}")
    try:
        body = json.loads(result.body)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("choices"), list) and body["choices"]:
        choice = body["choices"][0]
        _check_refusal(choice.get("message") if isinstance(choice, dict) else None, result.text)
    _check_finish(result.finish_reason == "length", result.finish_reason == "content_filter", result.text)
    usage = body.get("usage") if isinstance(body, dict) else None
    total = None
    if result.input_tokens is not None and result.output_tokens is not None:
        total = result.input_tokens + result.output_tokens
    return Answer(
        content=result.text,
        model=result.model,
        finish_reason=result.finish_reason,
        usage=usage if isinstance(usage, dict) else None,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        total_tokens=total,
    )


def answer(result):
    """The model's text in the final result of a chat request; see `interpret`."""
    return interpret(result).content


def parse_answer(body):
    """The `Answer` in a successful response body, OpenAI- or Anthropic-shaped."""
    try:
        value = json.loads(body)
    except ValueError as e:
        raise RowError(
            "invalid_response", f"the endpoint's answer is not JSON ({e}): {excerpt(body)}"
        ) from None
    if isinstance(value, dict) and "choices" in value:
        return _openai_answer(value, body)
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        return _anthropic_answer(value)
    raise RowError(
        "invalid_response",
        f"the answer has neither choices (OpenAI) nor content blocks (Anthropic): {excerpt(body)}",
    )


def _openai_answer(value, body):
    choices = value.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict):
        raise RowError("invalid_response", f"the answer has no choices: {excerpt(body)}")
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    content = content if isinstance(content, str) else ""
    reason = choice.get("finish_reason")
    _check_refusal(message, content)
    _check_finish(reason == "length", reason == "content_filter", content)
    usage = value.get("usage") if isinstance(value.get("usage"), dict) else None
    return Answer(
        content=content,
        model=value.get("model"),
        finish_reason=reason,
        usage=usage,
        input_tokens=_int(usage, "prompt_tokens"),
        output_tokens=_int(usage, "completion_tokens"),
        total_tokens=_int(usage, "total_tokens"),
    )


def _anthropic_answer(value):
    content = "".join(
        block.get("text", "")
        for block in value["content"]
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
    )
    reason = value.get("stop_reason")
    _check_finish(reason == "max_tokens", reason == "refusal", content)
    usage = value.get("usage") if isinstance(value.get("usage"), dict) else None
    input_tokens = _int(usage, "input_tokens")
    output_tokens = _int(usage, "output_tokens")
    total = None if input_tokens is None or output_tokens is None else input_tokens + output_tokens
    return Answer(
        content=content,
        model=value.get("model"),
        finish_reason=reason,
        usage=usage,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=total,
    )


def _check_refusal(message, content):
    # OpenAI's structured outputs decline in `refusal` rather than the text;
    # the same code as Anthropic's `refusal` stop reason, with the model's words.
    refusal = message.get("refusal") if isinstance(message, dict) else None
    if not content.strip() and isinstance(refusal, str) and refusal.strip():
        raise RowError("content_filtered", f"the model refused to answer: {excerpt(refusal.strip())}")


def _check_finish(truncated, filtered, content):
    if truncated:
        raise RowError(
            "response_truncated",
            "the answer was cut off at max_tokens; raise max_tokens. "
            f"Partial answer: {excerpt(content)}",
        )
    if filtered:
        raise RowError("content_filtered", "the provider's content filter withheld the answer")
    if not content.strip():
        raise RowError("empty_response", "the model answered with no text")


def _int(usage, key):
    value = usage.get(key) if usage else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def status_error(response):
    """The row error for an error status. The code comes from the provider's
    error code, never its wording."""
    try:
        error = json.loads(response.body).get("error")
    except (ValueError, AttributeError):
        error = None
    error = error if isinstance(error, dict) else {}
    code = error.get("code") if isinstance(error.get("code"), str) else ""
    message = error.get("message")
    if not isinstance(message, str):
        message = excerpt(response.body)
    row_code = {
        "context_length_exceeded": "context_length_exceeded",
        "content_filter": "content_filtered",
        "content_policy_violation": "content_filtered",
    }.get(code, "llm_call_failed")
    attempts = f" after {response.attempts} attempts" if response.attempts > 1 else ""
    return RowError(row_code, f"HTTP {response.status}{attempts}: {message}")


def reply_body(content, finish_reason="stop", usage=None, model=None):
    """An OpenAI-shaped successful answer carrying `content`, as a provider
    would send it; for scripted hosts and fixtures."""
    value: dict[str, Any] = {"object": "chat.completion"}
    if model is not None:
        value["model"] = model
    value["choices"] = [
        {
            "index": 0,
            "finish_reason": finish_reason,
            "message": {"role": "assistant", "content": content},
        }
    ]
    if usage is not None:
        value["usage"] = usage
    return json.dumps(value)


def anthropic_reply_body(text, stop_reason="end_turn", usage=None, model=None):
    """An Anthropic Messages-shaped successful answer carrying `text`."""
    value: dict[str, Any] = {"type": "message", "role": "assistant"}
    if model is not None:
        value["model"] = model
    value["content"] = [{"type": "text", "text": text}]
    value["stop_reason"] = stop_reason
    if usage is not None:
        value["usage"] = usage
    return json.dumps(value)
