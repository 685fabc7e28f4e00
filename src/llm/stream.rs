//! Server-sent events, decoded from network chunks that may split anywhere:
//! inside a UTF-8 sequence, inside a JSON string, between `\r` and `\n`.
//!
//! Bytes are only turned into text once a whole line has arrived, and `\n`
//! never occurs inside a multi-byte UTF-8 sequence, so no character is ever
//! cut in two.

/// One dispatched event: its `event:` name (if any) and its joined `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// Incremental SSE parser (the WHATWG event-stream grammar, minus `id`/`retry`,
/// which no LLM provider relies on).
#[derive(Debug, Default)]
pub struct SseDecoder {
    buf: Vec<u8>,
    /// Where the unscanned part of `buf` starts: bytes before it hold no `\n`.
    scanned: usize,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one network chunk; appends every event it completes to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        self.buf.extend_from_slice(chunk);
        let mut line_start = 0;
        let mut i = self.scanned;
        while let Some(offset) = memchr_newline(&self.buf[i..]) {
            let end = i + offset;
            let mut line = &self.buf[line_start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            self.line(&line, out);
            line_start = end + 1;
            i = line_start;
        }
        self.buf.drain(..line_start);
        self.scanned = self.buf.len();
    }

    /// Ends the stream: a last event without its blank line still counts.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let text = String::from_utf8_lossy(&rest);
            let text = text.trim_end_matches('\r').to_string();
            self.line(&text, out);
        }
        self.scanned = 0;
        self.line("", out);
    }

    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
                self.has_data = false;
            }
            self.event = None;
            return;
        }
        if line.starts_with(':') {
            return; // a comment, e.g. a keep-alive ping
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
    }
}

fn memchr_newline(haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_pieces(bytes: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece) {
            d.push(chunk, &mut out);
        }
        d.finish(&mut out);
        out
    }

    #[test]
    fn events_survive_every_chunk_size() {
        let stream =
            "data: {\"t\":\"héllo 你好 🎉\"}\r\n\r\n: ping\n\nevent: message_stop\ndata: {}\n\ndata: [DONE]\n\n";
        let expected = vec![
            SseEvent {
                event: None,
                data: "{\"t\":\"héllo 你好 🎉\"}".into(),
            },
            SseEvent {
                event: Some("message_stop".into()),
                data: "{}".into(),
            },
            SseEvent {
                event: None,
                data: "[DONE]".into(),
            },
        ];
        for piece in 1..=stream.len() {
            assert_eq!(
                decode_in_pieces(stream.as_bytes(), piece),
                expected,
                "piece size {piece}"
            );
        }
    }

    #[test]
    fn multi_line_data_is_joined_with_newlines() {
        let out = decode_in_pieces(b"data: a\ndata: b\n\n", 3);
        assert_eq!(
            out,
            vec![SseEvent {
                event: None,
                data: "a\nb".into()
            }]
        );
    }

    #[test]
    fn last_event_without_blank_line_is_kept() {
        let out = decode_in_pieces(b"data: tail", 4);
        assert_eq!(
            out,
            vec![SseEvent {
                event: None,
                data: "tail".into()
            }]
        );
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let out = decode_in_pieces(b": keep-alive\nid: 7\nretry: 10\n\n", 5);
        assert!(out.is_empty());
    }
}
