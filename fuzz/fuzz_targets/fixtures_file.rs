//! Any text as a `weir test` fixtures file: parsed or refused, never a panic,
//! and every case it accepts answers what its rows and expectations are.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use weir_formats::fixtures::FixtureFile;
use weir_formats::yaml;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = yaml::from_str::<FixtureFile>(Path::new("fixtures.yaml"), text) else {
        return;
    };
    for case in &file.cases {
        if let Ok(rows) = case.input_rows() {
            let _ = case.row_expectations(rows.len());
        }
    }
});
