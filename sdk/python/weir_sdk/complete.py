"""What weir's host does for a typed chat request, written over `send`: the
chat-completions body it writes and how it reads the answer. `MockHost`
answers `complete` this way, so a transform's tests see the bodies the real
host would send. The host's executor hands back Anthropic answers in the chat
shape; a scripted Anthropic answer is read the same way here."""

import json
import math

from .host import CallError, ChatAnswer, ChatError, Request

_ANTHROPIC_REASONS = {"max_tokens": "length", "tool_use": "tool_calls", "refusal": "content_filter"}
_KNOWN = ("stop", "length", "content_filter", "tool_calls")


def over_send(host, requests):
    """One result per request, in order: a `ChatAnswer` or a `ChatError`."""
    written = []
    for request in requests:
        try:
            written.append(Request(endpoint=request.endpoint, body=body(request), row=request.row))
        except ValueError as e:
            written.append(ChatError("invalid_request", str(e)))
    sent = iter(host.send([w for w in written if isinstance(w, Request)]))
    results = []
    for w in written:
        if isinstance(w, ChatError):
            results.append(w)
            continue
        result = next(sent, CallError("transport", "the host returned no result"))
        results.append(ChatError("call", str(result), call_error=result) if isinstance(result, CallError) else read(result))
    return results


def body(request):
    """The chat-completions body: `extra`, with the typed fields over it."""
    if request.extra is not None and not isinstance(request.extra, dict):
        raise ValueError(f"extra is not a JSON object: {request.extra!r}")
    value = dict(request.extra or {})
    if request.model is not None:
        value["model"] = request.model
    value["messages"] = [{"role": m["role"], "content": m["content"]} for m in request.messages]
    if request.max_tokens is not None:
        value["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        if not math.isfinite(request.temperature):
            raise ValueError(f"temperature {request.temperature} is not a finite number")
        value["temperature"] = request.temperature
    if request.response_format is not None:
        if not isinstance(request.response_format, dict):
            raise ValueError(f"response-format is not a JSON object: {request.response_format!r}")
        value["response_format"] = request.response_format
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def read(response):
    """A successful answer read, or an `unreadable` `ChatError`."""
    try:
        value = json.loads(response.body)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return ChatError("unreadable", response=response)
    if isinstance(value.get("choices"), list) and value["choices"] and isinstance(value["choices"][0], dict):
        choice = value["choices"][0]
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        text = message.get("content") if isinstance(message.get("content"), str) else ""
        reason = choice.get("finish_reason")
        reason = "tool_calls" if reason == "function_call" else reason
        counts = ("prompt_tokens", "completion_tokens")
    elif isinstance(value.get("content"), list):
        text = "".join(
            b.get("text", "") for b in value["content"] if isinstance(b, dict) and isinstance(b.get("text"), str)
        )
        reason = _ANTHROPIC_REASONS.get(value.get("stop_reason"), "stop")
        counts = ("input_tokens", "output_tokens")
    else:
        return ChatError("unreadable", response=response)
    usage = value.get("usage") if isinstance(value.get("usage"), dict) else None
    count = lambda key: usage.get(key, 0) if usage is not None else None  # noqa: E731
    return ChatAnswer(
        text=text,
        finish_reason=reason if reason in _KNOWN else "other",
        input_tokens=count(counts[0]),
        output_tokens=count(counts[1]),
        model=value.get("model") if isinstance(value.get("model"), str) else None,
        status=response.status,
        attempts=response.attempts,
        latency_ms=response.latency_ms,
        body=response.body,
    )
