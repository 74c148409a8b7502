//! A source in an encoding other than UTF-8 (Windows-1252 from a spreadsheet,
//! Latin-1, UTF-16), read as UTF-8 as it streams, so the rows and what they
//! are compared against on resume are the same text whatever the file's bytes.

use encoding_rs::{CoderResult, Decoder, Encoding};
use std::io::{self, Read};

const CHUNK: usize = 64 * 1024;

pub struct Utf8Reader<R> {
    inner: R,
    decoder: Decoder,
    input: Vec<u8>,
    /// Bytes of `input` not decoded yet: `input[taken..filled]`.
    taken: usize,
    filled: usize,
    output: Vec<u8>,
    /// Decoded bytes not handed out yet: `output[given..written]`.
    given: usize,
    written: usize,
    /// The file has no more bytes.
    ended: bool,
    /// The decoder has been told so and has written its last bytes.
    flushed: bool,
}

impl<R: Read> Utf8Reader<R> {
    /// Reads `inner` as `encoding`; a byte order mark, when the file starts
    /// with one, says the encoding instead.
    pub fn new(inner: R, encoding: &'static Encoding) -> Self {
        Self {
            inner,
            decoder: encoding.new_decoder(),
            input: vec![0; CHUNK],
            taken: 0,
            filled: 0,
            output: vec![0; CHUNK * 3 + 16],
            given: 0,
            written: 0,
            ended: false,
            flushed: false,
        }
    }
}

impl<R: Read> Read for Utf8Reader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.given < self.written {
                let n = buf.len().min(self.written - self.given);
                buf[..n].copy_from_slice(&self.output[self.given..self.given + n]);
                self.given += n;
                return Ok(n);
            }
            if self.flushed {
                return Ok(0);
            }
            if self.taken == self.filled && !self.ended {
                self.filled = self.inner.read(&mut self.input)?;
                self.taken = 0;
                self.ended = self.filled == 0;
            }
            let (result, read, written, _) = self.decoder.decode_to_utf8(
                &self.input[self.taken..self.filled],
                &mut self.output,
                self.ended,
            );
            self.taken += read;
            self.given = 0;
            self.written = written;
            if self.ended && result == CoderResult::InputEmpty {
                self.flushed = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(bytes: &[u8], encoding: &'static Encoding) -> String {
        let mut text = String::new();
        Utf8Reader::new(bytes, encoding)
            .read_to_string(&mut text)
            .unwrap();
        text
    }

    #[test]
    fn windows_1252_and_utf_16_are_read_as_utf_8() {
        assert_eq!(
            decoded(
                b"id,text\n1,caf\xe9 cr\xe8me \x80\n",
                encoding_rs::WINDOWS_1252
            ),
            "id,text\n1,café crème €\n"
        );
        let utf16: Vec<u8> = [0xFF, 0xFE]
            .into_iter()
            .chain("a,b\n1,ü\n".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        assert_eq!(decoded(&utf16, encoding_rs::WINDOWS_1252), "a,b\n1,ü\n");
        let long = "é".repeat(100_000);
        let (latin, _, _) = encoding_rs::WINDOWS_1252.encode(&long);
        assert_eq!(decoded(&latin, encoding_rs::WINDOWS_1252), long);
    }
}
