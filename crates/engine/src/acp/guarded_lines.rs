//! mia-acp's incoming messages, read a line at a time within bounds.
//!
//! The ACP SDK reads a byte stream into lines without a limit and answers a
//! line it cannot parse with an error whose `id` is null (the client's
//! request then waits for ever) and whose data echoes the whole line. So
//! mia-acp reads the lines itself and hands the SDK only lines that are
//! safe to parse; a line too long to hold, nested deeper than the parser
//! goes, or not UTF-8 is answered here, under the request's own `id`, with
//! an error that says why, and the connection goes on:
//! - a request gets an error response (written straight to the client);
//! - an answer to one of mia-acp's requests (`fs/read_text_file`, a
//!   permission) becomes an error answer, so the call fails at once instead
//!   of waiting for its timeout;
//! - a notification is dropped, and logged.
//!
//! Only the first [`HEAD_BYTES`] of a refused line are kept, to find its
//! `id`: the rest is read and thrown away, never held.

use std::io;

use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Bytes of a refused line kept to find its `id` (JSON-RPC peers write it
/// before `params`).
const HEAD_BYTES: usize = 4096;

/// Deepest nesting passed on: serde_json stops at 128, so anything deeper
/// than this is refused here, with a message, before the SDK sees it.
pub const MAX_DEPTH: usize = 120;

/// What one line read from the client became.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A line to hand to the SDK as it is (or a stand-in error answer).
    Pass(String),
    /// An error response to write back to the client; the SDK sees nothing.
    Reply(String),
    /// Nothing to pass or answer (a refused notification, logged).
    Skip,
}

/// Reads lines of at most `max_bytes` from `reader`; see the module doc.
pub struct GuardedLines<R> {
    reader: R,
    max_bytes: usize,
}

impl<R> GuardedLines<R> {
    /// Whether a line that passed is a `session/prompt` request (its
    /// top-level `method`, read from its first bytes).
    pub fn is_prompt(line: &str) -> bool {
        let head = &line.as_bytes()[..line.len().min(HEAD_BYTES)];
        Head::scan(head).method_name.as_deref() == Some("session/prompt")
    }
}

impl<R: AsyncBufRead + Unpin> GuardedLines<R> {
    pub fn new(reader: R, max_bytes: usize) -> Self {
        GuardedLines { reader, max_bytes }
    }

    /// The next line, checked; `None` at the end of the stream.
    pub async fn next(&mut self) -> io::Result<Option<Line>> {
        let mut line: Vec<u8> = Vec::new();
        let mut head: Vec<u8> = Vec::new();
        // The last bytes of a refused line: its `id` may come after `params`.
        let mut tail: std::collections::VecDeque<u8> = std::collections::VecDeque::new();
        let mut total = 0usize;
        let mut over = false;
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                if total == 0 {
                    return Ok(None);
                }
                break;
            }
            let end = memchr::memchr(b'\n', available);
            let piece = &available[..end.unwrap_or(available.len())];
            total = total.saturating_add(piece.len());
            if !over && line.len() + piece.len() > self.max_bytes {
                over = true;
                head = std::mem::take(&mut line);
                head.truncate(HEAD_BYTES);
            }
            if over {
                let room = HEAD_BYTES.saturating_sub(head.len());
                head.extend_from_slice(&piece[..piece.len().min(room)]);
                let last = &piece[piece.len().saturating_sub(HEAD_BYTES)..];
                tail.extend(last);
                let extra = tail.len().saturating_sub(HEAD_BYTES);
                tail.drain(..extra);
            } else {
                line.extend_from_slice(piece);
            }
            let used = end.map_or(available.len(), |i| i + 1);
            self.reader.consume(used);
            if end.is_some() {
                break;
            }
        }
        if over {
            let reason = format!(
                "mia-acp: this message is {}, more than mia-acp reads ({} a message; see mia-acp-limits in doc/mia.txt). \
                 Send less: attach large files by link (resource_link) rather than by content.",
                human_mb(total),
                human_mb(self.max_bytes)
            );
            let tail: Vec<u8> = tail.into_iter().collect();
            return Ok(Some(refuse(&head, &tail, &reason)));
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if depth_exceeds(&line, MAX_DEPTH) {
            let reason = format!(
                "mia-acp: this message nests JSON more than {MAX_DEPTH} levels deep, deeper than mia-acp reads"
            );
            let from = line.len().saturating_sub(HEAD_BYTES);
            return Ok(Some(refuse(
                &line[..line.len().min(HEAD_BYTES)],
                &line[from..],
                &reason,
            )));
        }
        match String::from_utf8(line) {
            Ok(text) => Ok(Some(Line::Pass(text))),
            Err(e) => {
                let bytes = e.into_bytes();
                let from = bytes.len().saturating_sub(HEAD_BYTES);
                Ok(Some(refuse(
                    &bytes[..bytes.len().min(HEAD_BYTES)],
                    &bytes[from..],
                    "mia-acp: this message is not UTF-8 text; JSON-RPC messages must be",
                )))
            }
        }
    }
}

fn human_mb(bytes: usize) -> String {
    format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
}

/// The answer to a refused line whose first bytes are `head` and last
/// bytes `tail`.
fn refuse(head: &[u8], tail: &[u8], reason: &str) -> Line {
    let mut shape = Head::scan(head);
    if !shape.id_key {
        shape.id = trailing_id(tail);
        shape.id_key = shape.id.is_some();
    }
    match (shape.id, shape.method, shape.answer) {
        // A request: answered with the error, under its id.
        (Some(id), true, _) => {
            tracing::warn!("mia-acp: refused a request: {reason}");
            Line::Reply(
                json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32600, "message": reason } }).to_string(),
            )
        }
        // An answer to mia-acp's own request: that request fails now.
        (Some(id), false, true) => {
            tracing::warn!("mia-acp: refused an answer of the client: {reason}");
            Line::Pass(
                json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32600, "message": reason } }).to_string(),
            )
        }
        (None, true, _) if !shape.id_key => {
            tracing::warn!("mia-acp: dropped a notification: {reason}");
            Line::Skip
        }
        // Nothing to answer it by: a parse error with a null id, as JSON-RPC
        // says, without the line.
        _ => {
            tracing::warn!("mia-acp: refused a message with no id in its first {HEAD_BYTES} bytes: {reason}");
            Line::Reply(
                json!({ "jsonrpc": "2.0", "id": null, "error": { "code": -32700, "message": reason } }).to_string(),
            )
        }
    }
}

/// Nesting deeper than `max` anywhere in `line` (brackets inside strings
/// do not count).
fn depth_exceeds(line: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in line {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// What the first bytes of a message say of it: its top-level `id` (a
/// number or a string), and whether it has a `method` or a `result` /
/// `error` key.
#[derive(Debug, Default, PartialEq)]
struct Head {
    id: Option<Value>,
    /// An `id` key is there, whether or not its value is a valid id.
    id_key: bool,
    method: bool,
    /// The method's name, when it is a plain string.
    method_name: Option<String>,
    answer: bool,
}

impl Head {
    fn scan(head: &[u8]) -> Head {
        let mut out = Head::default();
        let mut depth = 0usize;
        let mut i = 0usize;
        // At depth 1, a string right after `{` or `,` is a key.
        let mut expect_key = false;
        while i < head.len() {
            let b = head[i];
            match b {
                b'"' => {
                    let Some(end) = string_end(head, i) else { break };
                    if depth == 1 && expect_key {
                        let key = &head[i + 1..end];
                        let mut j = skip_ws(head, end + 1);
                        if head.get(j) == Some(&b':') {
                            j = skip_ws(head, j + 1);
                            match key {
                                b"id" => {
                                    out.id_key = true;
                                    out.id = scalar_at(head, j);
                                }
                                b"method" => {
                                    out.method = true;
                                    out.method_name = scalar_at(head, j).and_then(|v| v.as_str().map(String::from));
                                }
                                b"result" | b"error" => out.answer = true,
                                _ => {}
                            }
                        }
                    }
                    expect_key = false;
                    i = end + 1;
                    continue;
                }
                b'{' | b'[' => {
                    depth += 1;
                    expect_key = b == b'{' && depth == 1;
                }
                b'}' | b']' => depth = depth.saturating_sub(1),
                b',' => expect_key = depth == 1,
                _ => {}
            }
            i += 1;
        }
        out
    }
}

/// The id of a message that ends with it: `…,"id":7}` (a number or a
/// string, then the closing brace of the top-level object and nothing else).
fn trailing_id(tail: &[u8]) -> Option<Value> {
    let end = tail.iter().rposition(|b| !b.is_ascii_whitespace())?;
    if tail[end] != b'}' {
        return None;
    }
    let body = &tail[..end];
    let at = memchr::memmem::rfind(body, b"\"id\"")?;
    let mut j = skip_ws(body, at + 4);
    if body.get(j) != Some(&b':') {
        return None;
    }
    j = skip_ws(body, j + 1);
    let value = &body[j..];
    let value = &value[..value.iter().rposition(|b| !b.is_ascii_whitespace())? + 1];
    // the whole rest must be one scalar: a nested `…{"id":5}}` ends otherwise
    match serde_json::from_slice::<Value>(value).ok()? {
        v @ (Value::Number(_) | Value::String(_)) => Some(v),
        _ => None,
    }
}

/// The index of the quote that closes the string opening at `start`.
fn string_end(s: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && s[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// A JSON-RPC id at `i`: a string or a number (anything else is no id).
fn scalar_at(s: &[u8], i: usize) -> Option<Value> {
    match s.get(i)? {
        b'"' => {
            let end = string_end(s, i)?;
            serde_json::from_slice::<Value>(&s[i..=end]).ok()
        }
        b'-' | b'0'..=b'9' => {
            let end = (i..s.len())
                .find(|&k| !matches!(s[k], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                .unwrap_or(s.len());
            // A number cut by the head's end is not trusted.
            (end < s.len()).then(|| serde_json::from_slice::<Value>(&s[i..end]).ok())?
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Line> {
        let mut g = GuardedLines::new(input, max);
        let mut out = Vec::new();
        while let Some(l) = g.next().await.expect("reads") {
            out.push(l);
        }
        out
    }

    fn reply(line: &Line) -> Value {
        match line {
            Line::Reply(t) | Line::Pass(t) => serde_json::from_str(t).expect("json"),
            Line::Skip => Value::Null,
        }
    }

    #[tokio::test]
    async fn lines_within_bounds_pass_as_they_are() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}\r\n{\"b\":[[[\"]]]]]\"]]]}\nlast";
        assert_eq!(
            lines(input, 100).await,
            vec![
                Line::Pass("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\"}".into()),
                Line::Pass("{\"b\":[[[\"]]]]]\"]]]}".into()),
                Line::Pass("last".into()),
            ]
        );
    }

    #[tokio::test]
    async fn an_overlong_request_is_answered_under_its_id_and_the_next_line_still_reads() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"req-7\",\"method\":\"session/prompt\",\"params\":{{\"t\":\"{}\"}}}}\n{{\"id\":2,\"method\":\"x\"}}\n",
            "x".repeat(100_000)
        );
        let got = lines(big.as_bytes(), 1000).await;
        assert_eq!(got.len(), 2);
        assert!(matches!(got[0], Line::Reply(_)));
        let r = reply(&got[0]);
        assert_eq!(r["id"], "req-7");
        assert!(r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than mia-acp reads"));
        assert_eq!(got[1], Line::Pass("{\"id\":2,\"method\":\"x\"}".into()));
    }

    #[tokio::test]
    async fn an_overlong_answer_fails_the_request_it_answers_and_a_notification_is_dropped() {
        let answer = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":12,\"result\":{{\"content\":\"{}\"}}}}\n",
            "y".repeat(5000)
        );
        let got = lines(answer.as_bytes(), 100).await;
        assert!(matches!(got[0], Line::Pass(_)), "handed to the SDK as the answer");
        assert_eq!(reply(&got[0])["id"], 12);
        assert!(reply(&got[0])["error"].is_object());
        let note = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"session/cancel\",\"params\":\"{}\"}}\n",
            "z".repeat(5000)
        );
        assert_eq!(lines(note.as_bytes(), 100).await, vec![Line::Skip]);
    }

    #[tokio::test]
    async fn deep_nesting_is_answered_with_its_id_and_never_reaches_the_parser() {
        let d = 10_000;
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"session/new\",\"params\":{{\"x\":{}{}}}}}\n",
            "[".repeat(d),
            "]".repeat(d)
        );
        let got = lines(deep.as_bytes(), 1 << 20).await;
        let r = reply(&got[0]);
        assert!(matches!(got[0], Line::Reply(_)));
        assert_eq!(r["id"], 3);
        assert!(r["error"]["message"].as_str().unwrap().contains("levels deep"));
        // Exactly at the bound passes (serde_json reads 128).
        let ok = format!("{}{}\n", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(matches!(lines(ok.as_bytes(), 1 << 20).await[0], Line::Pass(_)));
        assert!(serde_json::from_str::<Value>(&ok).is_ok());
    }

    #[tokio::test]
    async fn a_line_with_no_id_to_answer_gets_a_null_id_parse_error_without_its_text() {
        let junk = format!("{}\n", "q".repeat(5000));
        let got = lines(junk.as_bytes(), 100).await;
        let r = reply(&got[0]);
        assert_eq!(r["id"], Value::Null);
        assert!(!r.to_string().contains("qqqq"));
        let bad = b"{\"id\":5,\"method\":\"m\",\"params\":\"\xff\xfe\"}\n";
        let r = reply(&lines(bad, 1000).await[0]);
        assert_eq!(r["id"], 5);
        assert!(r["error"]["message"].as_str().unwrap().contains("UTF-8"));
    }

    fn run_lines(input: &[u8], max: usize) -> Vec<Line> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(lines(input, max))
    }

    proptest::proptest! {
        /// Whatever a client writes: one answer per line, in order, nothing
        /// passed on that is longer than the bound or that serde_json
        /// cannot take for its depth, and every refused request answered
        /// under its own id.
        #[test]
        fn every_line_gets_one_safe_outcome(
            msgs in proptest::collection::vec(
                (0u32..1_000_000, 0usize..300, 0usize..3000, proptest::bool::ANY),
                1..8,
            ),
        ) {
            let max = 1024;
            let mut input = Vec::new();
            for (id, depth, pad, string_id) in &msgs {
                let id = if *string_id { format!("\"r-{id}\"") } else { id.to_string() };
                input.extend_from_slice(
                    format!(
                        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"session/prompt\",\"params\":{{\"p\":\"{}\",\"x\":{}{}}}}}\n",
                        "p".repeat(*pad),
                        "[".repeat(*depth),
                        if *depth == 0 { "0".to_string() } else { "]".repeat(*depth) }
                    )
                    .as_bytes(),
                );
            }
            let got = run_lines(&input, max);
            proptest::prop_assert_eq!(got.len(), msgs.len());
            for (line, (id, depth, _, string_id)) in got.iter().zip(&msgs) {
                match line {
                    Line::Pass(text) => {
                        proptest::prop_assert!(text.len() <= max);
                        proptest::prop_assert!(*depth <= MAX_DEPTH);
                        proptest::prop_assert!(serde_json::from_str::<Value>(text).is_ok());
                    }
                    Line::Reply(text) => {
                        let v: Value = serde_json::from_str(text).expect("an answer is JSON");
                        let want = if *string_id { json!(format!("r-{id}")) } else { json!(id) };
                        proptest::prop_assert_eq!(&v["id"], &want);
                        proptest::prop_assert!(v["error"]["message"].as_str().is_some());
                    }
                    Line::Skip => proptest::prop_assert!(false, "a request is never dropped"),
                }
            }
        }
    }

    #[tokio::test]
    async fn an_overlong_request_whose_id_comes_last_is_answered_under_it() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"session/new\",\"params\":{{\"p\":\"{}\"}},\"id\":7}}\n",
            "x".repeat(100_000)
        );
        let got = lines(big.as_bytes(), 1000).await;
        assert!(matches!(got[0], Line::Reply(_)), "{got:?}");
        assert_eq!(reply(&got[0])["id"], 7);
        // An id inside params at the end is not the message's.
        let nested = format!(
            "{{\"method\":\"n\",\"params\":{{\"p\":\"{}\",\"id\":5}}}}\n",
            "x".repeat(5000)
        );
        assert_eq!(lines(nested.as_bytes(), 1000).await, vec![Line::Skip]);
    }

    #[tokio::test]
    async fn a_request_with_an_id_that_is_no_id_gets_a_null_id_error() {
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{{\"a\":1}},\"method\":\"m\",\"params\":{}{}}}\n",
            "[".repeat(500),
            "]".repeat(500)
        );
        let got = lines(deep.as_bytes(), 1 << 20).await;
        assert!(matches!(got[0], Line::Reply(_)), "{got:?}");
        assert_eq!(reply(&got[0])["id"], Value::Null);
    }

    #[test]
    fn the_head_scan_takes_only_the_top_level_id() {
        let h = Head::scan(br#"{"params":{"id":9,"method":"no"},"id":4,"method":"m"}"#);
        assert_eq!(h.id, Some(json!(4)));
        assert!(h.method);
        assert_eq!(h.method_name.as_deref(), Some("m"));
        assert!(GuardedLines::<()>::is_prompt(
            r#"{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{}}"#
        ));
        assert!(!GuardedLines::<()>::is_prompt(
            r#"{"id":1,"params":{"method":"session/prompt"},"method":"x"}"#
        ));
        let h = Head::scan(br#"{"jsonrpc":"2.0","id":"a\"b","result":{"#);
        assert_eq!(h.id, Some(json!("a\"b")));
        assert!(h.answer && !h.method);
        // A number cut off by the head's end is no id.
        assert_eq!(Head::scan(br#"{"id":123"#).id, None);
        assert_eq!(Head::scan(br#"{"id":null,"method":"m"}"#).id, None);
    }
}
