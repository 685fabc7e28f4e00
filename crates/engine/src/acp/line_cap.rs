//! Bounds on what another process writes to mia: ACP messages are lines of
//! JSON, and a peer that never ends a line would otherwise make the reader
//! buffer without end, inside Neovim's process.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// Longest ACP message mia reads from an agent or a client: a whole file in
/// `fs/write_text_file` or a diff fits many times over.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Reads through to `inner` and fails the read once a line grows past
/// `max` bytes, saying so in `fault` (when given) for the user's message.
pub struct LineCap<R> {
    inner: R,
    max: usize,
    /// Bytes read since the last newline.
    open_line: usize,
    fault: Option<Arc<Mutex<Option<String>>>>,
}

impl<R> LineCap<R> {
    pub fn new(inner: R, max: usize, fault: Option<Arc<Mutex<Option<String>>>>) -> Self {
        LineCap {
            inner,
            max,
            open_line: 0,
            fault,
        }
    }

    /// Counts `new` bytes; the error when a line in them is too long.
    fn count(&mut self, new: &[u8]) -> io::Result<()> {
        let mut rest = new;
        while let Some(i) = memchr::memchr(b'\n', rest) {
            if self.open_line + i > self.max {
                return Err(self.too_long());
            }
            self.open_line = 0;
            rest = &rest[i + 1..];
        }
        self.open_line += rest.len();
        if self.open_line > self.max {
            return Err(self.too_long());
        }
        Ok(())
    }

    fn too_long(&self) -> io::Error {
        let text = format!(
            "stopped by mia: it sent a message longer than {} MB, more than mia reads",
            self.max / (1024 * 1024)
        );
        if let Some(fault) = &self.fault {
            *fault.lock().unwrap_or_else(|p| p.into_inner()) = Some(text.clone());
        }
        io::Error::new(io::ErrorKind::InvalidData, text)
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineCap<R> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                Poll::Ready(this.count(new))
            }
            other => other,
        }
    }
}

/// Reads `reader` to its end and gives each line to `line`, cut to
/// `max_line` bytes (the rest of a longer line is dropped, not buffered).
pub async fn read_cut_lines<R: AsyncRead + Unpin>(mut reader: R, max_line: usize, mut line: impl FnMut(String)) {
    let mut chunk = vec![0u8; 8192];
    let mut current: Vec<u8> = Vec::new();
    let mut cut = false;
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            let end = memchr::memchr(b'\n', rest);
            let piece = &rest[..end.unwrap_or(rest.len())];
            let room = max_line.saturating_sub(current.len());
            current.extend_from_slice(&piece[..piece.len().min(room)]);
            cut |= piece.len() > room;
            match end {
                Some(i) => {
                    line(finish(&mut current, &mut cut));
                    rest = &rest[i + 1..];
                }
                None => rest = &[],
            }
        }
    }
    if !current.is_empty() {
        line(finish(&mut current, &mut cut));
    }
}

fn finish(current: &mut Vec<u8>, cut: &mut bool) -> String {
    let mut text = String::from_utf8_lossy(current).trim_end_matches('\r').to_string();
    if *cut {
        text.push('…');
    }
    current.clear();
    *cut = false;
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all<R: AsyncRead + Unpin>(mut r: R) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        r.read_to_end(&mut out).await?;
        Ok(out)
    }

    #[tokio::test]
    async fn lines_up_to_the_limit_pass_and_a_longer_one_fails_and_says_why() {
        let ok = b"12345\n1234\n".to_vec();
        assert_eq!(read_all(LineCap::new(&ok[..], 5, None)).await.expect("fits"), ok);
        let fault = Arc::new(Mutex::new(None));
        let long = b"1234\n123456\n".to_vec();
        let err = read_all(LineCap::new(&long[..], 5, Some(fault.clone())))
            .await
            .expect_err("too long");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(fault.lock().unwrap().as_deref().unwrap().contains("longer than"));
        // A line that never ends is caught too, in small reads.
        let (mut w, r) = tokio::io::duplex(4);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for _ in 0..100 {
                if w.write_all(b"xx").await.is_err() {
                    break;
                }
            }
        });
        assert!(read_all(LineCap::new(r, 50, None)).await.is_err());
        writer.abort();
    }

    #[tokio::test]
    async fn stderr_lines_are_cut_and_the_rest_is_dropped() {
        let text = format!("short\r\n{}\nlast", "y".repeat(100_000));
        let mut lines = Vec::new();
        read_cut_lines(text.as_bytes(), 10, |l| lines.push(l)).await;
        assert_eq!(
            lines,
            vec!["short".to_string(), format!("{}…", "y".repeat(10)), "last".into()]
        );
    }
}
