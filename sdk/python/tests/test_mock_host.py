import pytest

from weir_sdk import Chat, ConfigureError, RowError, Transform
from weir_sdk.testing import MockHost, configure, run


class Shout(Transform):
    def __init__(self, options, node):
        options.refuse_unknown("endpoint", "fail_on")
        self.endpoint = node.endpoint(options.text("endpoint", None))
        self.fail_on = options.text("fail_on", None)
        if self.fail_on == "configure":
            raise ValueError("boom at configure")

    def output_fields(self):
        return ["loud"]

    def process_row(self, row, cx):
        text = row.str_field("text")
        if text == self.fail_on:
            raise ValueError("boom")
        cx.attach("prompt_chars", len(text))
        cx.log("debug", f"shouting row {cx.index}")
        row["loud"] = cx.chat(self.endpoint, Chat().temperature(0).user(f"Shout: {text}"))
        return row


def test_answers_are_scripted_per_endpoint_in_order_and_requests_recorded():
    host = MockHost().grant("llm").reply_chat("llm", "HELLO").reply_chat("llm", "BYE")
    results = run(Shout, host, {}, [{"text": "hello"}, {"text": "bye"}])
    assert results == [[{"text": "hello", "loud": "HELLO"}], [{"text": "bye", "loud": "BYE"}]]
    assert [r.endpoint for r in host.requests] == ["llm", "llm"]
    assert [r.row for r in host.requests] == [0, 1]
    assert host.request_bodies()[1] == {"messages": [{"role": "user", "content": "Shout: bye"}], "temperature": 0}
    assert host.attached == [(0, "prompt_chars", "5"), (1, "prompt_chars", "3")]
    assert host.logs == [("debug", "shouting row 0"), ("debug", "shouting row 1")]
    assert host.unused_answers() == 0


def test_status_bodies_and_failures_are_scripted():
    host = (
        MockHost().grant("llm")
        .reply("llm", 429, {"error": {"message": "Rate limit reached"}}, attempts=3)
        .fail("llm", "transport", "connection reset by peer")
        .fail("llm", "deadline_exceeded", "429 for 300 s")
    )
    results = run(Shout, host, {}, [{"text": "a"}, {"text": "b"}, {"text": "c"}, {"text": "d"}])
    assert results[0] == RowError("llm_call_failed", "HTTP 429 after 3 attempts: Rate limit reached")
    assert results[1] == RowError("llm_call_failed", "connection reset by peer")
    assert results[2].code == "retry_timeout"
    # Nothing left in the script: the mock says so rather than inventing an answer.
    assert results[3].code == "llm_call_failed" and "no answer scripted" in results[3].message


class AskOther(Transform):
    def process_row(self, row, cx):
        row["answer"] = cx.chat("other", Chat().user("hi"))
        return row


def test_an_endpoint_not_granted_is_denied():
    results = run(AskOther, MockHost().grant("llm").reply_chat("other", "x"), {}, [{}])
    assert results[0] == RowError("endpoint_denied", "endpoint `other` is not granted to node `test`")


def test_an_exception_in_row_code_fails_that_row_only():
    host = MockHost().grant("llm").reply_chat("llm", "OK")
    results = run(Shout, host, {"fail_on": "bad"}, [{"text": "bad"}, {"text": "good"}])
    assert results[0] == RowError("guest_exception", "ValueError: boom")
    assert results[1] == [{"text": "good", "loud": "OK"}]
    assert any("Traceback" in message and "boom" in message for _, message in host.logs)


def test_an_exception_in_configure_refuses_the_options_with_its_message():
    with pytest.raises(ConfigureError) as caught:
        configure(Shout, MockHost().grant("llm"), {"fail_on": "configure"})
    assert (caught.value.path, caught.value.detail) == ([], "ValueError: boom at configure")
    with pytest.raises(ConfigureError) as caught:
        configure(Shout, MockHost().grant("a", "b"), {})
    assert caught.value.path == ["endpoint"]
    assert caught.value.message.startswith("options.endpoint:")
    with pytest.raises(ConfigureError) as caught:
        configure(Shout, MockHost().grant("llm"), {"colour": "red"})
    assert "unknown field `colour`" in caught.value.message


class Batch(Transform):
    """Sends every row's request in one call, as a batching node should."""

    def process(self, rows, host):
        from weir_sdk import Request, interpret
        if any(row.get("explode") for row in rows):
            raise RuntimeError("the batch exploded")
        results = host.send([Request("llm", Chat().user(r["text"]).body(), i) for i, r in enumerate(rows)])
        out = []
        for row, result in zip(rows, results):
            try:
                row["answer"] = interpret(result).content
                out.append(row)
            except RowError as e:
                out.append(e)
        return out


def test_a_batch_is_sent_at_once_and_an_exception_fails_every_row_of_it():
    host = MockHost().grant("llm").reply_chat("llm", "1").reply("llm", 400, "bad")
    results = run(Batch, host, {}, [{"text": "a"}, {"text": "b"}])
    assert results[0] == [{"text": "a", "answer": "1"}]
    assert results[1] == RowError("llm_call_failed", "HTTP 400: bad")
    results = run(Batch, MockHost().grant("llm"), {}, [{"text": "a"}, {"text": "b", "explode": True}])
    assert results == [RowError("guest_exception", "RuntimeError: the batch exploded")] * 2


class Odd(Transform):
    def process_row(self, row, cx):
        mode = row["mode"]
        if mode == "none":
            return None
        if mode == "drop":
            return []
        if mode == "two":
            return [row, {"copy": True}]
        if mode == "nan":
            row["x"] = float("nan")
            return row
        if mode == "oom":
            raise MemoryError()
        return row


def test_what_row_code_returns_is_checked():
    host = MockHost()
    results = run(Odd, host, {}, [{"mode": "none"}, {"mode": "drop"}, {"mode": "two"}, {"mode": "nan"}])
    assert results[0].code == "guest_exception" and "was `return row` forgotten?" in results[0].message
    assert results[1] == []
    assert results[2] == [{"mode": "two"}, {"copy": True}]
    assert results[3].code == "guest_exception" and results[3].message.startswith("ValueError")


def test_running_out_of_memory_is_not_turned_into_a_row_error():
    # Inside a component this traps, and weir reports the memory limit.
    with pytest.raises(MemoryError):
        run(Odd, MockHost(), {}, [{"mode": "oom"}])


def test_the_anthropic_shape_is_scripted_too():
    host = MockHost().grant("llm").reply_anthropic("llm", "LOUD", usage={"input_tokens": 5, "output_tokens": 1})
    assert run(Shout, host, {}, [{"text": "x"}]) == [[{"text": "x", "loud": "LOUD"}]]


def test_complete_writes_the_body_weir_would_and_reads_the_scripted_answer():
    host = MockHost().grant("llm").reply_chat("llm", "hi", finish_reason="length", usage={"prompt_tokens": 3, "completion_tokens": 1}, model="m")
    [answer] = host.complete([Chat("m").temperature(0.2).param("seed", 1).user("q").request("llm", 0)])
    assert host.request_bodies() == [{"seed": 1, "model": "m", "messages": [{"role": "user", "content": "q"}], "temperature": 0.2}]
    assert (answer.text, answer.finish_reason, answer.input_tokens, answer.output_tokens, answer.model) == ("hi", "length", 3, 1, "m")
