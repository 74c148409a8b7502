"""A test tool: a transform on weir_sdk that raises where a row or its
options ask it to, so CI can check, through the real host, that an
exception fails its row (or refuses the options) instead of trapping, and
that running out of memory still traps.

A row's `action`: `ok` (adds done: yes), `raise` (raises ValueError),
`row_error` (raises a RowError), `oom` (allocates until memory runs out).
Option `raise_in_configure`: configure raises ValueError with that message.
"""

import weir_sdk
from weir_sdk import RowError


class Raise(weir_sdk.Transform):
    def __init__(self, options, node):
        options.refuse_unknown("raise_in_configure")
        message = options.text("raise_in_configure", None)
        if message is not None:
            raise ValueError(message)

    def output_fields(self):
        return ["done"]

    def process_row(self, row, cx):
        action = row.str_field("action")
        if action == "raise":
            raise ValueError("boom")
        if action == "row_error":
            raise RowError("my_code", "as asked")
        if action == "oom":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        row["done"] = "yes"
        return row


Transform = weir_sdk.export(Raise)
