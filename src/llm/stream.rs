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

/// Splits network chunks into complete lines (without `\n` or a final `\r`).
#[derive(Debug, Default)]
struct Lines {
    buf: Vec<u8>,
    /// Where the unscanned part of `buf` starts: bytes before it hold no `\n`.
    scanned: usize,
}

impl Lines {
    /// Adds `chunk` and calls `each` with every line it completes.
    fn push(&mut self, chunk: &[u8], mut each: impl FnMut(&str)) {
        self.buf.extend_from_slice(chunk);
        let mut line_start = 0;
        let mut i = self.scanned;
        while let Some(offset) = memchr_newline(&self.buf[i..]) {
            let end = i + offset;
            let mut line = &self.buf[line_start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            each(&String::from_utf8_lossy(line));
            line_start = end + 1;
            i = line_start;
        }
        self.buf.drain(..line_start);
        self.scanned = self.buf.len();
    }

    /// The last line when the stream ended without its newline.
    fn rest(&mut self) -> Option<String> {
        self.scanned = 0;
        if self.buf.is_empty() {
            return None;
        }
        let rest = std::mem::take(&mut self.buf);
        Some(String::from_utf8_lossy(&rest).trim_end_matches('\r').to_string())
    }
}

/// Incremental SSE parser (the WHATWG event-stream grammar, minus `id`/`retry`,
/// which no LLM provider relies on).
#[derive(Debug, Default)]
pub struct SseDecoder {
    lines: Lines,
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
        let mut lines = std::mem::take(&mut self.lines);
        lines.push(chunk, |line| self.line(line, out));
        self.lines = lines;
    }

    /// Ends the stream: a last event without its blank line still counts.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if let Some(rest) = self.lines.rest() {
            self.line(&rest, out);
        }
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

/// Newline-delimited JSON (`application/x-ndjson`, Ollama's native API):
/// each non-empty line is one event's data.
#[derive(Debug, Default)]
pub struct NdjsonDecoder {
    lines: Lines,
}

impl NdjsonDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one network chunk; appends every complete line to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        self.lines.push(chunk, |line| Self::emit(line, out));
    }

    /// Ends the stream: a last line without its newline still counts.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if let Some(rest) = self.lines.rest() {
            Self::emit(&rest, out);
        }
    }

    fn emit(line: &str, out: &mut Vec<SseEvent>) {
        let text = line.trim();
        if !text.is_empty() {
            out.push(SseEvent {
                event: None,
                data: text.to_string(),
            });
        }
    }
}

/// A JSON array whose elements arrive over time (Gemini's
/// `streamGenerateContent` without `alt=sse`): each top-level element is one
/// event's data. Structural characters are ASCII, so scanning bytes never
/// splits a UTF-8 sequence; strings and escapes are tracked so braces inside
/// text do not count.
#[derive(Debug, Default)]
pub struct JsonArrayDecoder {
    buf: Vec<u8>,
    pos: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    start: Option<usize>,
}

impl JsonArrayDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds one network chunk; appends every complete element to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        self.buf.extend_from_slice(chunk);
        while self.pos < self.buf.len() {
            let b = self.buf[self.pos];
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
            } else {
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => {
                        self.depth += 1;
                        if self.depth == 2 {
                            self.start = Some(self.pos);
                        }
                    }
                    b'}' | b']' => {
                        if self.depth == 2 {
                            if let Some(start) = self.start.take() {
                                let text = String::from_utf8_lossy(&self.buf[start..=self.pos]).into_owned();
                                out.push(SseEvent {
                                    event: None,
                                    data: text,
                                });
                            }
                        }
                        self.depth = self.depth.saturating_sub(1);
                    }
                    _ => {}
                }
            }
            self.pos += 1;
        }
        // Drop what no element still needs.
        let keep_from = self.start.unwrap_or(self.pos);
        self.buf.drain(..keep_from);
        self.pos -= keep_from;
        if let Some(start) = self.start.as_mut() {
            *start -= keep_from;
        }
    }

    /// True when the stream stopped inside an element (a truncated answer).
    pub fn incomplete(&self) -> bool {
        self.start.is_some()
    }
}

/// How a streamed response body is framed, from its `content-type`.
#[derive(Debug)]
pub enum FrameDecoder {
    Sse(SseDecoder),
    Ndjson(NdjsonDecoder),
    JsonArray(JsonArrayDecoder),
}

impl FrameDecoder {
    /// SSE unless the content type says NDJSON or plain JSON.
    pub fn for_content_type(content_type: &str) -> Self {
        let ct = content_type.to_ascii_lowercase();
        if ct.contains("ndjson") || ct.contains("jsonl") {
            FrameDecoder::Ndjson(NdjsonDecoder::new())
        } else if ct.contains("application/json") {
            FrameDecoder::JsonArray(JsonArrayDecoder::new())
        } else {
            FrameDecoder::Sse(SseDecoder::new())
        }
    }

    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        match self {
            FrameDecoder::Sse(d) => d.push(chunk, out),
            FrameDecoder::Ndjson(d) => d.push(chunk, out),
            FrameDecoder::JsonArray(d) => d.push(chunk, out),
        }
    }

    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        match self {
            FrameDecoder::Sse(d) => d.finish(out),
            FrameDecoder::Ndjson(d) => d.finish(out),
            FrameDecoder::JsonArray(_) => {}
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

    fn frame_in_pieces(mut d: FrameDecoder, bytes: &[u8], piece: usize) -> Vec<String> {
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece) {
            d.push(chunk, &mut out);
        }
        d.finish(&mut out);
        out.into_iter().map(|e| e.data).collect()
    }

    #[test]
    fn ndjson_lines_survive_every_chunk_size() {
        let stream = "{\"t\":\"héllo 🎉\"}\r\n\n{\"t\":\"a\\nb\"}\n{\"done\":true}";
        for piece in 1..=stream.len() {
            let got = frame_in_pieces(
                FrameDecoder::for_content_type("application/x-ndjson"),
                stream.as_bytes(),
                piece,
            );
            assert_eq!(
                got,
                vec!["{\"t\":\"héllo 🎉\"}", "{\"t\":\"a\\nb\"}", "{\"done\":true}"],
                "piece {piece}"
            );
        }
    }

    #[test]
    fn json_array_elements_survive_every_chunk_size() {
        let stream = "[{\"t\":\"br{ace} \\\"q\\\" ]\", \"n\":[1,{\"x\":2}]}\r\n,\n{\"t\":\"你好\"}\n]";
        let expected = vec![
            "{\"t\":\"br{ace} \\\"q\\\" ]\", \"n\":[1,{\"x\":2}]}",
            "{\"t\":\"你好\"}",
        ];
        for piece in 1..=stream.len() {
            let got = frame_in_pieces(
                FrameDecoder::for_content_type("application/json; charset=UTF-8"),
                stream.as_bytes(),
                piece,
            );
            assert_eq!(got, expected, "piece {piece}");
        }
    }

    #[test]
    fn a_json_array_cut_inside_an_element_is_incomplete() {
        let mut d = JsonArrayDecoder::new();
        let mut out = Vec::new();
        d.push(b"[{\"a\":1},{\"b\":", &mut out);
        assert_eq!(out.len(), 1);
        assert!(d.incomplete());
    }

    #[test]
    fn event_stream_content_type_means_sse() {
        assert!(matches!(
            FrameDecoder::for_content_type("text/event-stream"),
            FrameDecoder::Sse(_)
        ));
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let out = decode_in_pieces(b": keep-alive\nid: 7\nretry: 10\n\n", 5);
        assert!(out.is_empty());
    }
}
