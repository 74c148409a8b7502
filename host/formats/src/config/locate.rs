//! Finds the line of a key in a block-style YAML document, so that errors found
//! after parsing (an unknown endpoint, a missing file) still point at a line.

/// Returns the 1-based line of the last key in `path`, following the keys as
/// nested mappings; a numeric path element selects the n-th `- ` list item.
pub fn line_of(text: &str, path: &[&str]) -> Option<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let (mut start, mut end) = (0, lines.len());
    let mut found = None;
    for key in path {
        if let Ok(n) = key.parse::<usize>() {
            let line = nth_item(&lines[start..end], n)? + start;
            // The item's first key sits on the dash line itself.
            end = item_end(&lines, line);
            start = line;
            found = Some(line + 1);
        } else {
            let line = find_key(&lines[start..end], key)? + start;
            end = key_end(&lines, line);
            start = line + 1;
            found = Some(line + 1);
        }
    }
    found
}

/// The line of the deepest key along `path` that the document has, going no
/// shallower than its first `keep` keys: a key the file leaves out (an
/// option a component requires, say) has no line of its own, so the mapping
/// that would hold it stands in.
pub fn nearest_line_of(text: &str, path: &[&str], keep: usize) -> Option<usize> {
    (keep.min(path.len())..=path.len())
        .rev()
        .find_map(|n| line_of(text, &path[..n]))
}

/// Indentation of a line's first key, counting a list dash as indentation.
fn key_indent(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '-']).len()
}

fn leading_spaces(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_content(line: &str) -> bool {
    let t = line.trim_start();
    !t.is_empty() && !t.starts_with('#')
}

fn is_item(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("- ") || t == "-"
}

/// Finds `key:` among the lines at the block's own (first) indentation.
fn find_key(block: &[&str], key: &str) -> Option<usize> {
    let level = block
        .iter()
        .find(|l| is_content(l))
        .map(|l| key_indent(l))?;
    block.iter().position(|line| {
        let body = line.trim_start_matches([' ', '-']);
        is_content(line)
            && key_indent(line) == level
            && body
                .split_once(':')
                .is_some_and(|(name, _)| name.trim().trim_matches(['"', '\'']) == key)
    })
}

fn nth_item(block: &[&str], n: usize) -> Option<usize> {
    let level = block
        .iter()
        .find(|l| is_item(l))
        .map(|l| leading_spaces(l))?;
    block
        .iter()
        .enumerate()
        .filter(|(_, l)| is_item(l) && leading_spaces(l) == level)
        .nth(n)
        .map(|(i, _)| i)
}

/// A key's block ends at the next line indented no deeper than the key.
fn key_end(lines: &[&str], line: usize) -> usize {
    let indent = key_indent(lines[line]);
    next_matching(lines, line, |l| key_indent(l) <= indent)
}

/// A list item ends at the next item of its list or anything less indented.
fn item_end(lines: &[&str], line: usize) -> usize {
    let dash = leading_spaces(lines[line]);
    next_matching(lines, line, |l| {
        leading_spaces(l) < dash || (is_item(l) && leading_spaces(l) == dash)
    })
}

fn next_matching(lines: &[&str], line: usize, ends: impl Fn(&str) -> bool) -> usize {
    (line + 1..lines.len())
        .find(|&i| is_content(lines[i]) && ends(lines[i]))
        .unwrap_or(lines.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
source:
  path: in.csv
endpoints:
  llm:
    kind: openai
    pool_size: 4
transforms:
  - name: first
    component: llm
    endpoints: [llm]
  - name: second
    component: ./x.wasm
    options:
      template: hi
sinks:
  - path: out.csv
";

    #[test]
    fn finds_nested_keys_and_list_items() {
        assert_eq!(line_of(DOC, &["source", "path"]), Some(2));
        assert_eq!(line_of(DOC, &["endpoints", "llm", "pool_size"]), Some(6));
        assert_eq!(line_of(DOC, &["transforms", "0", "endpoints"]), Some(10));
        assert_eq!(line_of(DOC, &["transforms", "1", "name"]), Some(11));
        assert_eq!(line_of(DOC, &["transforms", "1", "component"]), Some(12));
        assert_eq!(
            line_of(DOC, &["transforms", "1", "options", "template"]),
            Some(14)
        );
        assert_eq!(line_of(DOC, &["sinks", "0", "path"]), Some(16));
    }

    #[test]
    fn a_missing_key_is_located_at_the_nearest_mapping_the_document_has() {
        let options = ["transforms", "1", "options", "template"];
        assert_eq!(nearest_line_of(DOC, &options, 3), Some(14));
        let missing = ["transforms", "1", "options", "params", "temperature"];
        assert_eq!(nearest_line_of(DOC, &missing, 3), Some(13));
        let no_options = ["transforms", "0", "options", "labels"];
        assert_eq!(nearest_line_of(DOC, &no_options, 3), None);
        assert_eq!(nearest_line_of(DOC, &no_options, 2), Some(8));
    }

    #[test]
    fn missing_keys_give_none() {
        assert_eq!(line_of(DOC, &["endpoints", "other"]), None);
        assert_eq!(line_of(DOC, &["transforms", "5"]), None);
    }
}
