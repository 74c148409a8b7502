//! Rows written to an `on_error` sink: what entered the failing node, with
//! why and where it failed.

use super::stage::Failure;
use crate::types::Row;
use serde_json::Value;

/// The fields added to a quarantined row, in this order.
pub const FIELDS: [&str; 4] = [
    "_error_node",
    "_error_code",
    "_error_message",
    "_source_row",
];

/// One row per row that entered the failing node; a row the source could not
/// read (nothing entered) still gets one, with the error alone.
pub fn rows(failure: &Failure, members: &[u64], node: Option<&str>) -> Vec<Row> {
    let mut rows = match failure.input.as_slice() {
        [] => vec![Row::new()],
        input => input.to_vec(),
    };
    let source_row = match members {
        [one] => Value::from(*one),
        several => Value::String(
            several
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" "),
        ),
    };
    for row in &mut rows {
        let values = [
            node.map_or(Value::String("(source)".into()), |n| {
                Value::String(n.into())
            }),
            Value::String(failure.error.code.clone()),
            Value::String(failure.error.message.clone()),
            source_row.clone(),
        ];
        for (field, value) in FIELDS.iter().zip(values) {
            row.insert(field.to_string(), value);
        }
    }
    rows
}
