"""topic: labels each row's text with one of the configured topics, asked of
a chat model.

Options (the node's `options:` in the pipeline file):
  labels    (required) the topics to choose from
  field     (default "text") the row field to classify
  output    (default "topic") the field the label is written to
  model     sent as the request's model when given
  endpoint  which granted endpoint to ask; by default the only one

Row errors: missing_field, unknown_label (the model answered something else),
llm_call_failed, retry_timeout, endpoint_denied, invalid_response.
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.transform import NodeInfo, Outcome_Failed, Outcome_Rows
from wit_world.imports import context, executor
from wit_world.imports.types import RowError


class RowFailure(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class Topic:
    """The node's settings, checked once at configure."""

    KNOWN = {"labels", "field", "output", "model", "endpoint"}

    def __init__(self, options, node_name, endpoints):
        unknown = sorted(set(options) - self.KNOWN)
        if unknown:
            raise ValueError(f"options: unknown field `{unknown[0]}`")
        labels = options.get("labels")
        if not isinstance(labels, list) or not all(isinstance(l, str) for l in labels):
            raise ValueError("options.labels: give the labels as a list of text")
        if not labels:
            raise ValueError("options.labels: give at least one label")
        self.labels = labels
        self.field = options.get("field", "text")
        self.output = options.get("output", "topic")
        self.model = options.get("model")
        self.endpoint = pick_endpoint(options.get("endpoint"), node_name, endpoints)
        self.system_prompt = (
            "Classify the text into exactly one of these labels: "
            + ", ".join(labels)
            + ". Answer with the label only."
        )

    def request_body(self, text):
        body = {}
        if self.model is not None:
            body["model"] = self.model
        body["messages"] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": text},
        ]
        body["temperature"] = 0
        return json.dumps(body)

    def label(self, answer):
        said = answer.strip().rstrip(".").strip()
        for label in self.labels:
            if label.lower() == said.lower():
                return label
        raise RowFailure(
            "unknown_label",
            f"the model answered `{answer.strip()}`, which is not one of: "
            + ", ".join(self.labels),
        )


def pick_endpoint(chosen, node_name, granted):
    if chosen is not None:
        if chosen in granted:
            return chosen
        raise ValueError(
            f"options.endpoint: `{chosen}` is not granted to node `{node_name}`"
        )
    if len(granted) == 1:
        return granted[0]
    raise ValueError(
        f"options.endpoint: node `{node_name}` is granted {len(granted)} endpoints; "
        "name the one to use"
    )


def text_of(row, field):
    value = row.get(field)
    if value is None:
        raise RowFailure("missing_field", f"the row has no field `{field}`")
    if not isinstance(value, str):
        raise RowFailure("missing_field", f"field `{field}` is not text")
    return value


def answer_of(result):
    """The model's text, or the row error its failure maps to."""
    if isinstance(result, Err):
        error = result.value
        if isinstance(error, executor.CallError_Status):
            return answer_of_status(error.value)
        code = {
            executor.CallError_DeadlineExceeded: "retry_timeout",
            executor.CallError_Denied: "endpoint_denied",
        }.get(type(error), "llm_call_failed")
        raise RowFailure(code, str(error.value))
    response = result.value
    if response.status >= 300:
        return answer_of_status(response)
    try:
        return json.loads(response.body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise RowFailure("invalid_response", "the answer has no choices[0].message.content")


def answer_of_status(response):
    try:
        message = json.loads(response.body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.body[:200]
    raise RowFailure("llm_call_failed", f"HTTP {response.status}: {message}")


def failed(failure):
    return Outcome_Failed(RowError(code=failure.code, message=failure.message))


# componentize-py makes a new Transform for every call, so the settings
# configure makes live at module level, once per component instance.
TOPIC = None


class Transform(exports.Transform):
    def configure(self, options):
        global TOPIC
        try:
            TOPIC = Topic(json.loads(options), context.node_name(), context.endpoints())
        except ValueError as e:
            raise Err(str(e))
        return NodeInfo(output_fields=[TOPIC.output])

    def process(self, rows):
        topic = TOPIC
        outcomes = [None] * len(rows)
        parsed, requests, asked = [], [], []
        for index, text in enumerate(rows):
            row = json.loads(text)
            parsed.append(row)
            try:
                body = topic.request_body(text_of(row, topic.field))
            except RowFailure as failure:
                outcomes[index] = failed(failure)
                continue
            requests.append(executor.Request(endpoint=topic.endpoint, body=body, row=index))
            asked.append(index)
        # One call for every row's request: the host sends them concurrently.
        results = executor.send(requests) if requests else []
        for index, result in zip(asked, results):
            try:
                parsed[index][topic.output] = topic.label(answer_of(result))
                outcomes[index] = Outcome_Rows([json.dumps(parsed[index])])
            except RowFailure as failure:
                outcomes[index] = failed(failure)
        return outcomes
