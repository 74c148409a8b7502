//! The elements of one JSON array, read one at a time so that a file larger
//! than memory streams as JSON Lines do. Each element's bytes are cut out by
//! following strings and brackets, then parsed alone; its line is where it
//! begins.

use std::io::{BufRead, ErrorKind};

/// An element's bytes and the line it begins on.
pub struct Element {
    pub line: u64,
    pub bytes: Vec<u8>,
}

/// Where the array's shape breaks: nothing after it can be read as rows.
pub struct Broken {
    pub line: u64,
    pub problem: String,
}

pub struct ArrayElements<R> {
    input: R,
    line: u64,
    state: State,
}

#[derive(PartialEq)]
enum State {
    /// Before the `[`.
    Start,
    /// After the `[`: an element or the `]`.
    First,
    /// After an element: `,` or `]`.
    Between,
    Done,
}

impl<R: BufRead> ArrayElements<R> {
    pub fn new(input: R) -> Self {
        Self {
            input,
            line: 1,
            state: State::Start,
        }
    }

    /// The next element, `None` after the `]`, or where the shape breaks.
    pub fn next_element(&mut self) -> Option<Result<Element, Broken>> {
        let result = self.step();
        if !matches!(result, Some(Ok(_))) {
            self.state = State::Done;
        }
        result
    }

    fn step(&mut self) -> Option<Result<Element, Broken>> {
        loop {
            if self.state == State::Done {
                return None;
            }
            let next = match self.skip_whitespace() {
                Ok(next) => next,
                Err(broken) => return Some(Err(broken)),
            };
            match (&self.state, next) {
                (State::Start, Some(b'[')) => {
                    self.consume();
                    self.state = State::First;
                }
                (State::Start, _) => {
                    return Some(Err(self.broken("the file does not begin with `[`")));
                }
                (State::First | State::Between, Some(b']')) => {
                    self.consume();
                    return match self.skip_whitespace() {
                        Ok(None) => None,
                        Ok(Some(_)) => {
                            Some(Err(self.broken("text follows the array's closing `]`")))
                        }
                        Err(broken) => Some(Err(broken)),
                    };
                }
                (State::Between, Some(b',')) => {
                    self.consume();
                    self.state = State::First;
                    return match self.skip_whitespace() {
                        Ok(Some(b']')) => Some(Err(self.broken("a `,` with no element after it"))),
                        Ok(_) => Some(self.element()),
                        Err(broken) => Some(Err(broken)),
                    };
                }
                (State::First, Some(_)) => return Some(self.element()),
                (_, None) => {
                    return Some(Err(
                        self.broken("the file ends before the array's closing `]`")
                    ));
                }
                (State::Between, Some(other)) => {
                    return Some(Err(self.broken(&format!(
                        "expected `,` or `]` after an element, found `{}`",
                        other.escape_ascii()
                    ))));
                }
                (State::Done, _) => unreachable!("returned above"),
            }
        }
    }

    /// Cuts out the element that begins here: an object, an array, a
    /// string, or a bare word or number up to the next `,`, `]` or space.
    fn element(&mut self) -> Result<Element, Broken> {
        let line = self.line;
        let mut bytes = Vec::new();
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        loop {
            let Some(b) = self.peek()? else {
                return Err(Broken {
                    line,
                    problem: "the file ends inside the element that begins here".into(),
                });
            };
            if !in_string && depth == 0 && !bytes.is_empty() && ends_a_word(b) {
                break;
            }
            self.consume();
            bytes.push(b);
            if b == b'\n' {
                self.line += 1;
            }
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
            } else {
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => depth = depth.saturating_sub(1),
                    _ => {}
                }
            }
            if !in_string && depth == 0 && matches!(b, b'}' | b']' | b'"') {
                break;
            }
        }
        self.state = State::Between;
        Ok(Element { line, bytes })
    }

    /// The next byte that is not white space, not consumed; `None` at the end.
    fn skip_whitespace(&mut self) -> Result<Option<u8>, Broken> {
        loop {
            match self.peek()? {
                Some(b'\n') => self.line += 1,
                Some(b' ' | b'\t' | b'\r') => {}
                other => return Ok(other),
            }
            self.consume();
        }
    }

    fn peek(&mut self) -> Result<Option<u8>, Broken> {
        loop {
            match self.input.fill_buf() {
                Ok(buffer) => return Ok(buffer.first().copied()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Broken {
                        line: self.line,
                        problem: format!("cannot read the file: {e}"),
                    });
                }
            }
        }
    }

    fn consume(&mut self) {
        self.input.consume(1);
    }

    fn broken(&self, problem: &str) -> Broken {
        Broken {
            line: self.line,
            problem: problem.to_string(),
        }
    }
}

fn ends_a_word(b: u8) -> bool {
    matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\r' | b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elements(text: &str) -> Vec<Result<(u64, String), (u64, String)>> {
        let mut array = ArrayElements::new(text.as_bytes());
        std::iter::from_fn(|| array.next_element())
            .map(|e| match e {
                Ok(e) => Ok((e.line, String::from_utf8(e.bytes).unwrap())),
                Err(b) => Err((b.line, b.problem)),
            })
            .collect()
    }

    #[test]
    fn elements_are_cut_out_with_the_line_they_begin_on() {
        let text =
            "[\n  {\"a\": \"x, ]}\\\"\"},\n  {\"b\": [1, {\"c\": 2}]}, 7 ,\"s\",\n  null\n]\n";
        assert_eq!(
            elements(text),
            vec![
                Ok((2, r#"{"a": "x, ]}\""}"#.to_string())),
                Ok((3, r#"{"b": [1, {"c": 2}]}"#.to_string())),
                Ok((3, "7".to_string())),
                Ok((3, "\"s\"".to_string())),
                Ok((4, "null".to_string())),
            ]
        );
        assert_eq!(elements("[]"), vec![]);
        assert_eq!(elements(" [ ] \n"), vec![]);
    }

    #[test]
    fn a_broken_shape_is_told_at_its_line_and_ends_the_elements() {
        assert_eq!(
            elements("[{\"a\":1}\n{\"a\":2}]"),
            vec![
                Ok((1, "{\"a\":1}".to_string())),
                Err((
                    2,
                    "expected `,` or `]` after an element, found `{`".to_string()
                )),
            ]
        );
        assert_eq!(
            elements("[{\"a\":1},\n{\"a\":"),
            vec![
                Ok((1, "{\"a\":1}".to_string())),
                Err((
                    2,
                    "the file ends inside the element that begins here".to_string()
                )),
            ]
        );
        assert_eq!(
            elements("[{\"a\":1},]"),
            vec![
                Ok((1, "{\"a\":1}".to_string())),
                Err((1, "a `,` with no element after it".to_string())),
            ]
        );
        assert_eq!(
            elements("[{\"a\":1}\n"),
            vec![
                Ok((1, "{\"a\":1}".to_string())),
                Err((
                    2,
                    "the file ends before the array's closing `]`".to_string()
                )),
            ]
        );
        assert_eq!(
            elements("[1] [2]"),
            vec![
                Ok((1, "1".to_string())),
                Err((1, "text follows the array's closing `]`".to_string())),
            ]
        );
    }
}
