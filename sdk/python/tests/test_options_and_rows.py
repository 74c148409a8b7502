import pytest

from weir_sdk import ConfigureError, NodeCx, Options, Row, RowError


def refusal(call):
    with pytest.raises(ConfigureError) as caught:
        call()
    return caught.value.message


def test_unknown_options_are_refused_by_name():
    message = refusal(lambda: Options({"labels": [], "colour": 1}).refuse_unknown("labels", "field"))
    assert message.startswith("options.colour: unknown field `colour`"), message
    Options({"labels": []}).refuse_unknown("labels", "field")


def test_required_options_and_defaults():
    options = Options({"labels": ["a"], "n": 3, "t": 0.5, "b": True, "model": None})
    assert options.text_list("labels", non_empty=True) == ["a"]
    assert options.text("field", "text") == "text"
    assert options.text("model", None) is None
    assert options.integer("n", min=1) == 3
    assert options.number("t", max=2) == 0.5
    assert options.boolean("b") is True
    assert refusal(lambda: options.text("missing")) == "options.missing: this option is required"


def test_typed_getters_name_the_option_and_what_was_wrong():
    options = Options({"labels": "a", "n": "3", "flag": 1, "mode": "x", "empty": [], "low": 0})
    assert refusal(lambda: options.text_list("labels")) == "options.labels: expected a list of text, got text"
    assert refusal(lambda: options.integer("n")) == "options.n: expected an integer, got text"
    assert refusal(lambda: options.boolean("flag")) == "options.flag: expected true or false, got a number"
    assert refusal(lambda: options.one_of("mode", ["a", "b"])).startswith("options.mode: `x` is not one of a, b")
    assert refusal(lambda: options.text_list("empty", non_empty=True)) == "options.empty: give at least one"
    assert refusal(lambda: options.integer("low", min=1)).startswith("options.low: 0 is below")
    assert refusal(lambda: Options([1])).startswith("options: expected a mapping")


def test_the_endpoint_is_the_chosen_or_the_only_one():
    assert NodeCx("tag", ["llm"]).endpoint() == "llm"
    assert NodeCx("tag", ["a", "b"]).endpoint("b") == "b"
    message = refusal(lambda: NodeCx("tag", ["a", "b"]).endpoint())
    assert message.startswith("options.endpoint:") and "a, b" in message
    assert "granted: none" in refusal(lambda: NodeCx("tag", []).endpoint("x"))


def test_fields_are_read_and_set_in_order():
    row = Row.parse('{"id":1,"text":"hi","note":null}')
    assert row.str_field("text") == "hi"
    assert row.optional_str_field("note") is None
    assert row.optional_str_field("absent", "d") == "d"
    with pytest.raises(RowError) as caught:
        row.str_field("id")
    assert caught.value == RowError("missing_field", "field `id` is a number, not text")
    with pytest.raises(RowError) as caught:
        row.str_field("nope")
    assert caught.value == RowError("missing_field", "the row has no field `nope`")
    with pytest.raises(RowError) as caught:
        row.optional_str_field("id")
    assert caught.value.code == "missing_field"
    row.set("out", "x")
    assert row.to_json() == '{"id":1,"text":"hi","note":null,"out":"x"}'
    with pytest.raises(RowError) as caught:
        Row.parse("[1]")
    assert caught.value.code == "invalid_row"


def test_a_refusal_written_as_weir_shows_it_keeps_its_option_path():
    nested = ConfigureError("options.params.temperature: must be at most 2")
    assert (nested.path, nested.detail) == (["params", "temperature"], "must be at most 2")
    item = ConfigureError("must not be empty", path=["labels", 2])
    assert item.message == "options.labels[2]: must not be empty"
    whole = ConfigureError("options: expected a mapping of options, got a list")
    assert (whole.path, whole.message) == ([], "options: expected a mapping of options, got a list")
