//! Finding the JSON in what a model wrote.

use serde_json::Value;

/// The JSON value in an answer: the whole text, else the first fenced block
/// (```json … ```), else the first balanced `{…}` or `[…]` in the text
/// (models like to add a sentence before or after).
pub fn extract_json(answer: &str) -> Result<Value, String> {
    let trimmed = answer.trim();
    if let Ok(value) = serde_json::from_str(trimmed) {
        return Ok(value);
    }
    if let Some(fenced) = fenced_block(trimmed)
        && let Ok(value) = serde_json::from_str(fenced.trim())
    {
        return Ok(value);
    }
    for (start, open) in trimmed
        .char_indices()
        .filter(|(_, c)| matches!(c, '{' | '['))
    {
        if let Some(end) = balanced_end(&trimmed[start..], open)
            && let Ok(value) = serde_json::from_str(&trimmed[start..start + end])
        {
            return Ok(value);
        }
    }
    Err("the answer holds no JSON".to_string())
}

fn fenced_block(text: &str) -> Option<&str> {
    let start = text.find("```")?;
    let after = &text[start + 3..];
    // Skip the info string (`json`, `JSON`, nothing) up to the line end.
    let body_start = after.find('\n').map_or(0, |n| n + 1);
    let body = &after[body_start..];
    let end = body.find("```")?;
    Some(&body[..end])
}

/// Length of the bracketed text starting at `text[0]`, skipping brackets
/// inside strings.
fn balanced_end(text: &str, open: char) -> Option<usize> {
    let close = if open == '{' { '}' } else { ']' };
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + c.len_utf8());
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_found_plain_fenced_or_surrounded() {
        assert_eq!(extract_json(r#" {"a": 1} "#).unwrap(), json!({"a": 1}));
        assert_eq!(
            extract_json("Sure!\n```json\n{\"a\": 2}\n```\nHope it helps.").unwrap(),
            json!({"a": 2})
        );
        assert_eq!(extract_json("```\n[1, 2]\n```").unwrap(), json!([1, 2]));
        assert_eq!(
            extract_json(r#"Here you go: {"a": "x}", "b": {"c": [1]}} — done {"#).unwrap(),
            json!({"a": "x}", "b": {"c": [1]}})
        );
        assert!(extract_json("no json here {oops").is_err());
    }
}
