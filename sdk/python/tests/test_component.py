"""The export glue against stand-ins for the bindings componentize-py
generates, so the conversions are checked without a wasm build."""

import importlib
import sys
import types
from dataclasses import dataclass

import pytest

from weir_sdk import ConfigureError, Transform


@dataclass
class Ok:
    value: object


class Err(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def install_fake_bindings(monkeypatch, sent, completed):
    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, m)
        return m

    @dataclass
    class Request:
        endpoint: str
        body: str
        row: int

    @dataclass
    class Response:
        status: int
        body: str
        attempts: int
        latency_ms: int

    @dataclass
    class CallError_Transport:
        value: str

    @dataclass
    class CallError_Status:
        value: Response

    @dataclass
    class CallError_Denied:
        value: str

    @dataclass
    class CallError_DeadlineExceeded:
        value: str

    def send(requests):
        sent.extend(requests)
        return [Err(CallError_Transport("connection reset")), Ok(Response(200, '{"choices":[{"message":{"content":"hi"}}]}', 1, 5))][: len(requests)]

    @dataclass
    class NodeInfo:
        output_fields: list

    @dataclass
    class Outcome_Rows:
        value: list

    @dataclass
    class Outcome_Failed:
        value: object

    @dataclass
    class RowError:
        code: str
        message: str

    @dataclass
    class ConfigError:
        path: list
        message: str

    @dataclass
    class Message:
        role: str
        content: str

    @dataclass
    class ChatRequest:
        endpoint: str
        row: int
        messages: list
        model: object
        max_tokens: object
        temperature: object
        response_format: object
        extra: object

    @dataclass
    class Usage:
        input_tokens: int
        output_tokens: int

    @dataclass
    class ChatAnswer:
        text: str
        finish_reason: str
        usage: object
        model: object
        status: int
        attempts: int
        latency_ms: int
        body: str

    @dataclass
    class ChatError_Call:
        value: object

    @dataclass
    class ChatError_InvalidRequest:
        value: str

    @dataclass
    class ChatError_Unreadable:
        value: Response

    def complete(requests):
        completed.extend(requests)
        return [
            Ok(ChatAnswer("hello", "length", Usage(4, 1), "m", 200, 1, 3, '{"usage":{"prompt_tokens":4}}')),
            Err(ChatError_Call(CallError_Status(Response(429, "slow down", 3, 9)))),
            Err(ChatError_InvalidRequest("extra is not a JSON object")),
        ][: len(requests)]

    module("componentize_py_types", Err=Err, Ok=Ok)
    module("wit_world")
    module("wit_world.exports", Transform=type("Transform", (), {}))
    module(
        "wit_world.exports.transform", NodeInfo=NodeInfo, Outcome_Rows=Outcome_Rows,
        Outcome_Failed=Outcome_Failed, ConfigError=ConfigError,
    )
    imports = module("wit_world.imports")
    imports.executor = module(
        "wit_world.imports.executor", Request=Request, send=send, CallError_Status=CallError_Status,
        CallError_Denied=CallError_Denied, CallError_DeadlineExceeded=CallError_DeadlineExceeded,
        CallError_Transport=CallError_Transport,
    )
    imports.chat = module(
        "wit_world.imports.chat", ChatRequest=ChatRequest, Message=Message, complete=complete,
        ChatError_Call=ChatError_Call, ChatError_InvalidRequest=ChatError_InvalidRequest,
        ChatError_Unreadable=ChatError_Unreadable,
    )
    imports.audit = module("wit_world.imports.audit", attach=lambda row, key, value: None)
    imports.log = module("wit_world.imports.log", Level=type("Level", (), {"DEBUG": 1, "INFO": 2}), log=lambda level, message: None)
    imports.context = module("wit_world.imports.context", node_name=lambda: "ask", endpoints=lambda: ["llm"])
    imports.types = module("wit_world.imports.types", RowError=RowError)
    import weir_sdk.component
    return importlib.reload(weir_sdk.component)


class Ask(Transform):
    def __init__(self, options, node):
        if options.boolean("explode", False):
            raise KeyError("explode")
        self.endpoint = node.endpoint()

    def output_fields(self):
        return ["answer"]

    def process_row(self, row, cx):
        if row.get("boom"):
            raise ValueError("boom")
        row["answer"] = cx.chat(self.endpoint, {"messages": []})
        return row


@pytest.fixture
def component(monkeypatch):
    sent = []
    module = install_fake_bindings(monkeypatch, sent, [])
    yield module, sent
    monkeypatch.undo()
    importlib.reload(module)


def test_configure_returns_the_fields_or_raises_err_with_a_config_error(component):
    module, _ = component
    export = module.export(Ask)
    assert export().configure("{}").output_fields == ["answer"]
    with pytest.raises(Err) as caught:
        export().configure('{"explode": true}')
    assert (caught.value.value.path, caught.value.value.message) == ([], "KeyError: 'explode'")
    with pytest.raises(Err) as caught:
        export().configure('{"explode": 1}')
    refusal = caught.value.value
    assert (refusal.path, refusal.message) == (["explode"], "expected true or false, got a number")


def test_a_refusal_names_a_nested_option_by_its_path(component):
    module, _ = component

    class Nested(Ask):
        def __init__(self, options, node):
            raise ConfigureError("must be at most 2", path=["params", "temperature"])

    with pytest.raises(Err) as caught:
        module.export(Nested)().configure("{}")
    assert caught.value.value.path == ["params", "temperature"]
    assert caught.value.value.message == "must be at most 2"


def test_complete_goes_through_the_chat_import_and_its_answers_are_read(monkeypatch):
    completed = []
    module = install_fake_bindings(monkeypatch, [], completed)
    try:
        from weir_sdk import Chat
        host = module.WitHost()
        results = host.complete([
            Chat("m").temperature(0).max_tokens(1).json_object().param("seed", 7).user("hi").request("llm", 2),
            Chat().user("a").request("llm", 3),
            Chat().user("b").request("llm", 4),
        ])
        first = completed[0]
        assert (first.endpoint, first.row, first.model, first.max_tokens) == ("llm", 2, "m", 1)
        assert first.temperature == 0.0 and isinstance(first.temperature, float)
        assert first.messages[0].content == "hi"
        assert (first.response_format, first.extra) == ('{"type":"json_object"}', '{"seed":7}')
        assert (results[0].text, results[0].finish_reason, results[0].input_tokens) == ("hello", "length", 4)
        assert results[1].kind == "call" and results[1].call_error.response.status == 429
        assert results[2].kind == "invalid_request"
    finally:
        monkeypatch.undo()
        importlib.reload(module)


def test_process_turns_exceptions_and_call_errors_into_failed_outcomes(component):
    module, sent = component
    export = module.export(Ask)
    export().configure("{}")
    outcomes = export().process(['{"boom":true}', '{"q":1}'])
    assert outcomes[0].value.code == "guest_exception" and outcomes[0].value.message == "ValueError: boom"
    # The row's request went out under its own index, and its transport error became llm_call_failed.
    assert [r.row for r in sent] == [1]
    assert outcomes[1].value.code == "llm_call_failed"


def test_process_before_configure_fails_every_row(component):
    module, _ = component
    outcomes = module.export(Ask)().process(["{}"])
    assert outcomes[0].value.code == "not_configured"


def test_natively_the_module_imports_without_bindings():
    import weir_sdk.component
    assert weir_sdk.component.IN_COMPONENT is False
    assert isinstance(ConfigureError("x"), Exception)
