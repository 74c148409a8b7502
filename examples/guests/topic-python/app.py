"""topic: labels each row's text with one of the configured topics, asked of
a chat model.

Options (the node's `options:` in the pipeline file):
  labels    (required) the topics to choose from
  field     (default "text") the row field to classify
  output    (default "topic") the field the label is written to
  model     sent as the request's model when given
  endpoint  which granted endpoint to ask; by default the only one

Row errors: missing_field, unknown_label (the model answered something else),
and the chat codes of weir_sdk (llm_call_failed, retry_timeout,
endpoint_denied, invalid_response, ...).
"""

import weir_sdk
from weir_sdk import Chat, ConfigureError, RowError


class Topic(weir_sdk.Transform):
    def __init__(self, options, node):
        options.refuse_unknown("labels", "field", "output", "model", "endpoint")
        self.labels = options.text_list("labels")
        if not self.labels:
            raise ConfigureError("options.labels: give at least one label")
        self.field = options.text("field", "text")
        self.output = options.text("output", "topic")
        self.model = options.text("model", None)
        self.endpoint = node.endpoint(options.text("endpoint", None))
        self.system_prompt = (
            "Classify the text into exactly one of these labels: "
            + ", ".join(self.labels)
            + ". Answer with the label only."
        )

    def output_fields(self):
        return [self.output]

    def process_row(self, row, cx):
        text = row.str_field(self.field)
        chat = Chat(self.model).temperature(0).system(self.system_prompt).user(text)
        answer = cx.chat(self.endpoint, chat)
        row[self.output] = self.label(answer)
        return row

    def label(self, answer):
        """The configured label the answer names, ignoring case, surrounding
        space and a final full stop."""
        said = answer.strip().rstrip(".").strip()
        for label in self.labels:
            if label.lower() == said.lower():
                return label
        raise RowError(
            "unknown_label",
            f"the model answered `{answer.strip()}`, which is not one of: "
            + ", ".join(self.labels),
        )


# The class componentize-py exports as the weir:transform contract.
Transform = weir_sdk.export(Topic)
