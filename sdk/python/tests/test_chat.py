import json
from types import SimpleNamespace

import pytest

from weir_sdk import CallError, Chat, Response, RowError, extract_json, interpret
from weir_sdk.chat import anthropic_reply_body, interpret_completed, reply_body


def ok(body, status=200):
    return Response(status=status, body=body if isinstance(body, str) else json.dumps(body))


def code_of(result):
    with pytest.raises(RowError) as caught:
        interpret(result)
    return caught.value.code


def test_only_what_is_set_is_sent():
    assert json.loads(Chat().user("hi").body()) == {"messages": [{"role": "user", "content": "hi"}]}
    body = json.loads(
        Chat("m").temperature(0).max_tokens(3).json_object().system("s").user("u").param("seed", 7).body()
    )
    assert body == {
        "model": "m",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        "temperature": 0,
        "max_tokens": 3,
        "response_format": {"type": "json_object"},
        "seed": 7,
    }


def test_a_json_schema_is_requested_by_name():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    body = Chat().user("u").json_schema("answer", schema).body_value()
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "strict": True, "schema": schema},
    }


def test_an_openai_answer_gives_text_usage_and_model():
    a = interpret(ok({
        "model": "m1",
        "choices": [{"message": {"content": "positive"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }))
    assert (a.content, a.model, a.finish_reason) == ("positive", "m1", "stop")
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (3, 1, 4)
    assert a.usage["total_tokens"] == 4


def test_an_anthropic_answer_gives_text_usage_and_stop_reason():
    a = interpret(ok({
        "type": "message",
        "model": "claude-x",
        "content": [{"type": "text", "text": "bill"}, {"type": "tool_use", "id": "t"}, {"type": "text", "text": "ing"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 12, "output_tokens": 2},
    }))
    assert (a.content, a.model, a.finish_reason) == ("billing", "claude-x", "end_turn")
    assert (a.input_tokens, a.output_tokens, a.total_tokens) == (12, 2, 14)


def test_truncated_filtered_and_empty_answers_are_row_errors():
    assert code_of(ok({"choices": [{"message": {"content": "posi"}, "finish_reason": "length"}]})) == "response_truncated"
    assert code_of(ok({"choices": [{"message": {"content": None}, "finish_reason": "content_filter"}]})) == "content_filtered"
    assert code_of(ok({"choices": [{"message": {"content": "  "}, "finish_reason": "stop"}]})) == "empty_response"
    assert code_of(ok(anthropic_reply_body("posi", stop_reason="max_tokens"))) == "response_truncated"
    assert code_of(ok(anthropic_reply_body("", stop_reason="refusal"))) == "content_filtered"
    assert code_of(ok({"type": "message", "content": [], "stop_reason": "end_turn"})) == "empty_response"


def test_a_refusal_is_a_row_error_with_the_models_words_raw_or_typed():
    body = {"choices": [{"message": {"content": None, "refusal": "I can't help with that."}, "finish_reason": "stop"}]}
    with pytest.raises(RowError) as raw:
        interpret(ok(body))
    typed = SimpleNamespace(
        text="", finish_reason="stop", body=json.dumps(body), model=None, input_tokens=None, output_tokens=None
    )
    with pytest.raises(RowError) as completed:
        interpret_completed(typed)
    for caught in (raw, completed):
        assert (caught.value.code, caught.value.message) == (
            "content_filtered",
            "the model refused to answer: I can't help with that.",
        )


def test_answers_that_are_not_chat_answers_are_invalid():
    assert code_of(ok("<html>oops</html>")) == "invalid_response"
    assert code_of(ok({"choices": []})) == "invalid_response"
    assert code_of(ok({"something": "else"})) == "invalid_response"
    assert code_of(ok([1, 2])) == "invalid_response"


def test_provider_error_codes_pick_the_row_error_code():
    with pytest.raises(RowError) as caught:
        interpret(CallError("status", "", Response(400, json.dumps({"error": {"message": "too long", "code": "context_length_exceeded"}}))))
    assert caught.value == RowError("context_length_exceeded", "HTTP 400: too long")
    with pytest.raises(RowError) as caught:
        interpret(CallError("status", "", Response(500, "<html>Bad gateway</html>", attempts=4)))
    assert caught.value == RowError("llm_call_failed", "HTTP 500 after 4 attempts: <html>Bad gateway</html>")
    anthropic_error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(RowError) as caught:
        interpret(CallError("status", "", Response(529, json.dumps(anthropic_error))))
    assert caught.value == RowError("llm_call_failed", "HTTP 529: Overloaded")
    # A non-2xx that arrives as a response is read the same way.
    assert code_of(ok({"error": {"code": "content_filter", "message": "no"}}, status=400)) == "content_filtered"


def test_executor_failures_map_to_codes():
    assert code_of(CallError("deadline_exceeded", "429 for 300 s")) == "retry_timeout"
    assert code_of(CallError("transport", "connection refused")) == "llm_call_failed"
    assert code_of(CallError("denied", "no endpoint `x`")) == "endpoint_denied"


def test_a_json_answer_tolerates_a_fence_and_prose():
    assert interpret(ok(reply_body('```json\n{"a": 2}\n```'))).json() == {"a": 2}
    with pytest.raises(RowError) as caught:
        interpret(ok(reply_body("no json here"))).json()
    assert caught.value.code == "response_unparsable"


def test_json_is_found_plain_fenced_or_surrounded():
    assert extract_json(' {"a": 1} ') == {"a": 1}
    assert extract_json('Sure!\n```json\n{"a": 2}\n```\nHope it helps.') == {"a": 2}
    assert extract_json("```\n[1, 2]\n```") == [1, 2]
    assert extract_json('Here you go: {"a": "x}", "b": {"c": [1]}} — done {') == {"a": "x}", "b": {"c": [1]}}
    with pytest.raises(ValueError):
        extract_json("no json here {oops")
