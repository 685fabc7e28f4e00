//! Server-sent events, decoded from network chunks that may split anywhere:
//! inside a UTF-8 sequence, inside a JSON string, between `\r` and `\n`.
//!
//! Bytes are only turned into text once a whole line has arrived, and `\n`
//! never occurs inside a multi-byte UTF-8 sequence, so no character is ever
//! cut in two.

/// The default largest event: one SSE event (all its `data:` lines), one
/// NDJSON line or one JSON-array element. Big enough for a large
/// tool-argument chunk, small enough that a broken or hostile server cannot
/// grow Neovim's memory without bound (`limits.max_event_bytes`).
pub const DEFAULT_MAX_EVENT_BYTES: usize = 8 << 20;

/// One dispatched event: its `event:` name (if any) and its joined `data:` lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// A line or event grew past the decoder's limit. The decoder has dropped
/// what it buffered; the stream cannot go on (feeding more is harmless but
/// only repeats this error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the provider sent a line over {} (limits.max_event_bytes = {limit})", human_bytes(*limit))]
pub struct EventTooLarge {
    /// The limit in force, in bytes.
    pub limit: usize,
}

/// `8 MiB`, `1.5 MiB`, `64 KiB`, `100 bytes`.
pub fn human_bytes(n: usize) -> String {
    const KIB: usize = 1 << 10;
    const MIB: usize = 1 << 20;
    let trim = |x: f64| {
        let s = format!("{x:.1}");
        s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
    };
    if n >= MIB {
        format!("{} MiB", trim(n as f64 / MIB as f64))
    } else if n >= KIB {
        format!("{} KiB", trim(n as f64 / KIB as f64))
    } else {
        format!("{n} bytes")
    }
}

/// Room on an SSE line for its field name (`data: `) besides the data.
const SSE_FIELD_SLACK: usize = 64;

/// Splits network chunks into complete lines (without `\n` or a final `\r`).
/// A line longer than `max` is an error as soon as its first `max + 1`
/// bytes have arrived: the partial line is dropped, not kept growing.
#[derive(Debug)]
struct Lines {
    buf: Vec<u8>,
    /// Where the unscanned part of `buf` starts: bytes before it hold no `\n`.
    scanned: usize,
    /// The longest line allowed.
    max: usize,
    /// The limit an error reports (an SSE line may hold a field name too).
    limit: usize,
    /// Set once a line was too long: later input is ignored.
    failed: bool,
}

impl Lines {
    /// Lines of at most `limit + slack` bytes.
    fn new(limit: usize, slack: usize) -> Self {
        let limit = limit.max(1);
        Lines {
            buf: Vec::new(),
            scanned: 0,
            max: limit.saturating_add(slack),
            limit,
            failed: false,
        }
    }

    fn fail(&mut self) -> EventTooLarge {
        self.failed = true;
        self.buf = Vec::new();
        self.scanned = 0;
        EventTooLarge { limit: self.limit }
    }

    /// Adds `chunk` and calls `each` with every line it completes; stops at
    /// the first error `each` returns.
    fn push(
        &mut self,
        chunk: &[u8],
        mut each: impl FnMut(&str) -> Result<(), EventTooLarge>,
    ) -> Result<(), EventTooLarge> {
        if self.failed {
            return Err(EventTooLarge { limit: self.limit });
        }
        let mut chunk = chunk;
        // Never buffer more than one byte past the limit: a line that long
        // has failed whatever follows, so the rest of the chunk is not copied.
        // (Only a newline within the allowance can save it.)
        let room = self.max.saturating_add(1).saturating_sub(self.buf.len());
        if chunk.len() > room && memchr::memchr(b'\n', chunk).is_none() {
            chunk = &chunk[..room];
        }
        self.buf.extend_from_slice(chunk);
        let mut line_start = 0;
        let mut i = self.scanned;
        let mut result = Ok(());
        while let Some(offset) = self.buf.get(i..).and_then(|rest| memchr::memchr(b'\n', rest)) {
            let end = i + offset;
            let mut line = self.buf.get(line_start..end).unwrap_or_default();
            if line.len() > self.max {
                return Err(self.fail());
            }
            if let Some(stripped) = line.strip_suffix(b"\r") {
                line = stripped;
            }
            result = each(&String::from_utf8_lossy(line));
            line_start = end + 1;
            i = line_start;
            if result.is_err() {
                break;
            }
        }
        if let Err(e) = result {
            self.fail();
            return Err(e);
        }
        self.buf.drain(..line_start.min(self.buf.len()));
        self.scanned = self.buf.len();
        if self.buf.len() > self.max {
            return Err(self.fail());
        }
        Ok(())
    }

    /// The last line when the stream ended without its newline.
    fn rest(&mut self) -> Option<String> {
        self.scanned = 0;
        if self.buf.is_empty() || self.failed {
            return None;
        }
        let rest = std::mem::take(&mut self.buf);
        Some(String::from_utf8_lossy(&rest).trim_end_matches('\r').to_string())
    }
}

/// Incremental SSE parser (the WHATWG event-stream grammar, minus `id`/`retry`,
/// which no LLM provider relies on). One event's `data:` lines together may
/// hold at most `max` bytes.
#[derive(Debug)]
pub struct SseDecoder {
    lines: Lines,
    /// The most bytes one event's data may hold.
    max_data: usize,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::with_limit(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    /// A decoder with the default limit ([`DEFAULT_MAX_EVENT_BYTES`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder whose lines and events may hold at most `max` bytes.
    pub fn with_limit(max: usize) -> Self {
        SseDecoder {
            lines: Lines::new(max, SSE_FIELD_SLACK),
            max_data: max.max(1),
            event: None,
            data: String::new(),
            has_data: false,
        }
    }

    /// Feeds one network chunk; appends every event it completes to `out`.
    /// An error means a line or an event passed the limit: stop reading.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), EventTooLarge> {
        let mut lines = std::mem::replace(&mut self.lines, Lines::new(1, 0));
        let result = lines.push(chunk, |line| self.line(line, out));
        self.lines = lines;
        if result.is_err() {
            self.data = String::new();
            self.has_data = false;
        }
        result
    }

    /// Ends the stream: a last event without its blank line still counts.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if let Some(rest) = self.lines.rest() {
            // Bounded by the line limit; an oversized event was already reported.
            let _ = self.line(&rest, out);
        }
        let _ = self.line("", out);
    }

    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) -> Result<(), EventTooLarge> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
                self.has_data = false;
            }
            self.event = None;
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(()); // a comment, e.g. a keep-alive ping
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                let joined = self.data.len() + usize::from(self.has_data) + value.len();
                if joined > self.max_data {
                    return Err(EventTooLarge { limit: self.max_data });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            _ => {}
        }
        Ok(())
    }
}

/// Newline-delimited JSON (`application/x-ndjson`, Ollama's native API):
/// each non-empty line is one event's data.
#[derive(Debug)]
pub struct NdjsonDecoder {
    lines: Lines,
}

impl Default for NdjsonDecoder {
    fn default() -> Self {
        Self::with_limit(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl NdjsonDecoder {
    /// A decoder with the default limit ([`DEFAULT_MAX_EVENT_BYTES`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder whose lines may hold at most `max` bytes.
    pub fn with_limit(max: usize) -> Self {
        NdjsonDecoder {
            lines: Lines::new(max, 0),
        }
    }

    /// Feeds one network chunk; appends every complete line to `out`.
    /// An error means a line passed the limit: stop reading.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), EventTooLarge> {
        self.lines.push(chunk, |line| {
            Self::emit(line, out);
            Ok(())
        })
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
/// text do not count. One element may hold at most `max` bytes.
#[derive(Debug)]
pub struct JsonArrayDecoder {
    buf: Vec<u8>,
    pos: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    start: Option<usize>,
    max: usize,
    failed: bool,
}

impl Default for JsonArrayDecoder {
    fn default() -> Self {
        Self::with_limit(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl JsonArrayDecoder {
    /// A decoder with the default limit ([`DEFAULT_MAX_EVENT_BYTES`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder whose elements may hold at most `max` bytes.
    pub fn with_limit(max: usize) -> Self {
        JsonArrayDecoder {
            buf: Vec::new(),
            pos: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            start: None,
            max: max.max(1),
            failed: false,
        }
    }

    fn fail(&mut self) -> EventTooLarge {
        self.failed = true;
        self.buf = Vec::new();
        self.pos = 0;
        self.start = None;
        EventTooLarge { limit: self.max }
    }

    /// Feeds one network chunk; appends every complete element to `out`.
    /// An error means an element passed the limit: stop reading.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), EventTooLarge> {
        if self.failed {
            return Err(EventTooLarge { limit: self.max });
        }
        // Scanned a piece at a time, so an element is refused once it is
        // `max` bytes long, before the rest of a big chunk is copied.
        for piece in chunk.chunks(64 << 10) {
            self.buf.extend_from_slice(piece);
            let scanned = self.scan(out);
            let open_too_long = self.start.is_some_and(|start| self.buf.len() - start > self.max);
            if scanned.is_err() || open_too_long {
                return Err(self.fail());
            }
        }
        Ok(())
    }

    /// Emits the elements completed so far; an error for one over the limit.
    fn scan(&mut self, out: &mut Vec<SseEvent>) -> Result<(), ()> {
        while let Some(&b) = self.buf.get(self.pos) {
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
                        self.depth = self.depth.saturating_add(1);
                        if self.depth == 2 {
                            self.start = Some(self.pos);
                        }
                    }
                    b'}' | b']' => {
                        if self.depth == 2 {
                            if let Some(start) = self.start.take() {
                                let element = self.buf.get(start..=self.pos).unwrap_or_default();
                                if element.len() > self.max {
                                    return Err(());
                                }
                                out.push(SseEvent {
                                    event: None,
                                    data: String::from_utf8_lossy(element).into_owned(),
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
        let keep_from = self.start.unwrap_or(self.pos).min(self.buf.len());
        self.buf.drain(..keep_from);
        self.pos = self.pos.saturating_sub(keep_from);
        if let Some(start) = self.start.as_mut() {
            *start = start.saturating_sub(keep_from);
        }
        Ok(())
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

/// Whether a stream's `content-type` names a framing mia reads: SSE
/// (`text/event-stream`), NDJSON (`application/x-ndjson`, `…jsonl`) or a
/// JSON array (`application/json`). Anything else is refused rather than
/// read as SSE (see `unsupported_stream_format`).
pub fn known_stream_type(content_type: &str) -> bool {
    let ct = content_type.to_ascii_lowercase();
    let mime = ct.split(';').next().unwrap_or("").trim();
    mime == "text/event-stream" || mime == "application/json" || mime.contains("ndjson") || mime.contains("jsonl")
}

impl FrameDecoder {
    /// SSE unless the content type says NDJSON or plain JSON; the default limit.
    pub fn for_content_type(content_type: &str) -> Self {
        Self::with_limit(content_type, DEFAULT_MAX_EVENT_BYTES)
    }

    /// SSE unless the content type says NDJSON or plain JSON; one event may
    /// hold at most `max` bytes.
    pub fn with_limit(content_type: &str, max: usize) -> Self {
        let ct = content_type.to_ascii_lowercase();
        if ct.contains("ndjson") || ct.contains("jsonl") {
            FrameDecoder::Ndjson(NdjsonDecoder::with_limit(max))
        } else if ct.contains("application/json") {
            FrameDecoder::JsonArray(JsonArrayDecoder::with_limit(max))
        } else {
            FrameDecoder::Sse(SseDecoder::with_limit(max))
        }
    }

    /// Feeds one network chunk. An error means one event passed the limit:
    /// stop reading the body.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), EventTooLarge> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_framings_mia_reads_are_known_stream_types() {
        for ct in [
            "text/event-stream",
            "Text/Event-Stream; charset=utf-8",
            "application/x-ndjson",
            "application/jsonl",
            "application/json; charset=UTF-8",
        ] {
            assert!(known_stream_type(ct), "{ct}");
        }
        for ct in [
            "text/html",
            "text/plain",
            "application/octet-stream",
            "",
            "text/event-streamx",
        ] {
            assert!(!known_stream_type(ct), "{ct}");
        }
    }

    fn decode_in_pieces(bytes: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(piece) {
            d.push(chunk, &mut out).unwrap();
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
            d.push(chunk, &mut out).unwrap();
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
        d.push(b"[{\"a\":1},{\"b\":", &mut out).unwrap();
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

    #[test]
    fn a_line_over_the_limit_fails_before_it_is_all_buffered() {
        for content_type in ["text/event-stream", "application/x-ndjson", "application/json"] {
            let mut d = FrameDecoder::with_limit(content_type, 1000);
            let mut out = Vec::new();
            let opening: &[u8] = if content_type == "application/json" {
                b"[{\"t\":\""
            } else {
                b"data: {\"t\":\""
            };
            d.push(opening, &mut out).unwrap();
            let mut fed = opening.len();
            let err = loop {
                match d.push(&[b'x'; 100], &mut out) {
                    Ok(()) => fed += 100,
                    Err(e) => break e,
                }
                assert!(fed < 2000, "{content_type}: no error after {fed} bytes");
            };
            assert_eq!(err, EventTooLarge { limit: 1000 });
            assert!(fed <= 1000 + 64, "{content_type}: {fed} bytes were accepted");
            assert!(out.is_empty());
            assert_eq!(
                err.to_string(),
                "the provider sent a line over 1000 bytes (limits.max_event_bytes = 1000)"
            );
            // Once failed, it stays failed.
            assert!(d.push(b"\n\n", &mut out).is_err());
        }
    }

    #[test]
    fn one_big_chunk_over_the_limit_is_refused_without_being_copied_whole() {
        let mut d = SseDecoder::with_limit(1 << 10);
        let mut out = Vec::new();
        let big = vec![b'x'; 1 << 20];
        assert!(d.push(&big, &mut out).is_err());
        assert!(d.lines.buf.capacity() < 64 << 10, "{}", d.lines.buf.capacity());
        let mut j = JsonArrayDecoder::with_limit(1 << 10);
        let mut big = b"[{\"a\":\"".to_vec();
        big.resize(1 << 20, b'x');
        assert!(j.push(&big, &mut out).is_err());
        assert!(j.buf.capacity() < 256 << 10, "{}", j.buf.capacity());
    }

    #[test]
    fn sse_data_lines_count_together_against_the_limit() {
        let mut d = SseDecoder::with_limit(10);
        let mut out = Vec::new();
        d.push(b"data: 12345\ndata: 1234\n", &mut out).unwrap();
        assert!(d.push(b"data: 1\n", &mut out).is_err());
        assert!(out.is_empty());
        // Exactly at the limit is fine.
        let mut d = SseDecoder::with_limit(10);
        d.push(b"data: 12345\ndata: 1234\n\n", &mut out).unwrap();
        assert_eq!(out[0].data, "12345\n1234");
    }

    #[test]
    fn lines_and_elements_at_the_limit_still_pass() {
        let line = format!("{{\"t\":\"{}\"}}", "y".repeat(90));
        assert_eq!(line.len(), 98);
        for (ct, wire) in [
            ("text/event-stream", format!("data:{line}\n\n")),
            ("application/x-ndjson", format!("{line}\n")),
            ("application/json", format!("[{line}]")),
        ] {
            let got = frame_in_pieces(FrameDecoder::with_limit(ct, 98), wire.as_bytes(), 7);
            assert_eq!(got, vec![line.clone()], "{ct}");
        }
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(8 << 20), "8 MiB");
        assert_eq!(human_bytes(3 << 19), "1.5 MiB");
        assert_eq!(human_bytes(64 << 10), "64 KiB");
        assert_eq!(human_bytes(100), "100 bytes");
    }
}
