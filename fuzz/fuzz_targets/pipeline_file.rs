//! Any text as a pipeline file: an error or a pipeline, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Variables resolve to a fixed value, so `${…}` is exercised too.
    let _ = weir_formats::config::load_text(Path::new("/nonexistent/fuzz.yaml"), text, |name| {
        (name.len() % 2 == 0).then(|| "value".to_string())
    });
});
