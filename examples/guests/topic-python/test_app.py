"""The topic logic, natively, against weir_sdk's mock host: `python -m pytest`."""

import pytest

from app import Topic
from weir_sdk import ConfigureError, RowError
from weir_sdk.testing import MockHost, configure, run

OPTIONS = {"labels": ["billing", "shipping", "other"]}


def test_labels_the_row_with_what_the_model_answered():
    host = MockHost().grant("llm").reply_chat("llm", " Shipping.\n")
    results = run(Topic, host, OPTIONS, [{"id": 7, "text": "Where is my parcel?"}])
    assert results[0] == [{"id": 7, "text": "Where is my parcel?", "topic": "shipping"}]
    body = host.request_bodies()[0]
    assert body["messages"][1] == {"role": "user", "content": "Where is my parcel?"}
    assert "billing, shipping, other" in body["messages"][0]["content"]
    assert body["temperature"] == 0 and "model" not in body


def test_an_answer_outside_the_labels_fails_that_row_only():
    host = MockHost().grant("llm").reply_chat("llm", "weather").reply_chat("llm", "billing")
    results = run(Topic, host, OPTIONS, [{"text": "Is it raining?"}, {"text": "Refund me"}])
    assert results[0].code == "unknown_label"
    assert results[1] == [{"text": "Refund me", "topic": "billing"}]


def test_a_row_without_the_field_fails_without_a_call():
    host = MockHost().grant("llm")
    results = run(Topic, host, OPTIONS, [{"body": "x"}])
    assert results[0] == RowError("missing_field", "the row has no field `text`")
    assert host.requests == []


def test_a_failed_call_fails_the_row_with_its_code():
    host = MockHost().grant("llm").reply("llm", 429, {"error": {"message": "Rate limit reached"}})
    host.fail("llm", "deadline_exceeded", "429 for 300 s")
    results = run(Topic, host, OPTIONS, [{"text": "a"}, {"text": "b"}])
    assert results[0] == RowError("llm_call_failed", "HTTP 429: Rate limit reached")
    assert results[1].code == "retry_timeout"


def test_bad_options_name_the_option():
    def refusal(host, options):
        with pytest.raises(ConfigureError) as caught:
            configure(Topic, host, options)
        return caught.value.message

    assert refusal(MockHost().grant("llm"), {"labels": []}).startswith("options.labels")
    assert refusal(MockHost().grant("a", "b"), OPTIONS).startswith("options.endpoint")
    assert "unknown field `colour`" in refusal(MockHost().grant("llm"), {"labels": ["x"], "colour": 1})
