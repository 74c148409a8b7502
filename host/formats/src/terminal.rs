//! Text that others wrote (a guest's log lines and row errors, an
//! endpoint's error message) made safe to print on a terminal or in a log:
//! a line break in it could forge a line of weir's own, and an escape
//! sequence could recolour or rewrite the screen.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character (CR, LF, tab, ESC, …) and every
/// bidirectional override written as a Rust escape (`\n`, `\u{1b}`), so it
/// prints as one line that shows what it holds. Other text is unchanged.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn line_breaks_and_escape_sequences_are_shown_not_obeyed() {
        assert_eq!(
            escape("a\r\nrun 1 finished\x1b[31m"),
            "a\\r\\nrun 1 finished\\u{1b}[31m"
        );
        assert_eq!(escape("tab\there\0"), "tab\\there\\0");
        assert_eq!(escape("\u{202e}evil"), "\\u{202e}evil");
        assert_eq!(escape("\u{7f}\u{85}"), "\\u{7f}\\u{85}");
    }

    #[test]
    fn plain_text_is_left_alone() {
        let text = "can't parse \"x\": naïve \\ café 🙂";
        assert!(matches!(escape(text), std::borrow::Cow::Borrowed(t) if t == text));
    }
}
