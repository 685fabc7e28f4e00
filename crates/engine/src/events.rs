//! The one road from the runtime to Neovim's main thread: an event queue and
//! a wake file descriptor that is signalled only when the queue goes from
//! empty to non-empty, so at most one wake is ever outstanding.
//!
//! Producers (runtime tasks) call [`EventQueue::push`]; the main thread's
//! poll watcher calls [`EventQueue::ack`] and later [`EventQueue::drain`].

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agent_client_protocol_schema::v1 as acp;
use serde::Serialize;

use crate::session::TurnEnd;
use mia_llm::delta::{Delta, StreamDone};
use mia_llm::error::{ErrorClass, LlmError};
use mia_proto::{EditorCall, ToolSource};

/// Identifies one stream (one `mia.stream` call) across the boundary.
pub type StreamId = u64;

/// What the runtime tells the main thread.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Delta {
        stream: StreamId,
        delta: Delta,
    },
    Done {
        stream: StreamId,
        done: Box<StreamDone>,
    },
    Error {
        stream: StreamId,
        error: LlmError,
    },
    /// The value of a one-shot job (a model list, a health check).
    Result {
        stream: StreamId,
        value: serde_json::Value,
    },
    /// The runtime asks Lua to do something (run a Lua tool, ask the user);
    /// Lua answers with `reply(call, ...)`.
    Call {
        stream: StreamId,
        call: u64,
        request: Box<EditorCall>,
    },
    /// A call the runtime no longer waits for (cancelled or timed out).
    Abort {
        stream: StreamId,
        call: u64,
    },
    /// One ACP `session/update` of a chat session's turn.
    Update {
        stream: StreamId,
        update: Box<acp::SessionUpdate>,
    },
    /// The end of a chat session's turn (ACP's answer to `session/prompt`).
    End {
        stream: StreamId,
        end: Box<TurnEnd>,
    },
    /// What only mia's UI shows: a retry countdown, a budget warning.
    Mia {
        stream: StreamId,
        event: MiaEvent,
    },
}

/// mia's own events beside ACP's updates: typed, never text to parse.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MiaEvent {
    /// A request failed and is retried after `delay_ms`.
    Retry {
        attempt: u32,
        max_retries: u32,
        delay_ms: u64,
        class: ErrorClass,
        message: String,
    },
    /// Something the user should know now (a budget warning crossed, a corrupt file set aside).
    Warning { text: String },
    /// A live status line for the chat ("starting the agent `claude`…"); empty text clears it.
    Status { text: String },
    /// What a tool name means changed (see `crate::tools::registry::ToolChange`).
    ToolChange {
        name: String,
        source: ToolSource,
        registered: bool,
    },
}

impl Event {
    pub fn stream(&self) -> StreamId {
        match self {
            Event::Delta { stream, .. }
            | Event::Done { stream, .. }
            | Event::Error { stream, .. }
            | Event::Result { stream, .. }
            | Event::Call { stream, .. }
            | Event::Abort { stream, .. }
            | Event::Update { stream, .. }
            | Event::End { stream, .. }
            | Event::Mia { stream, .. } => *stream,
        }
    }
}

/// How far back [`EventQueue::push`] looks for the last event of a text
/// piece's stream. Past it, the piece is queued on its own: nothing is lost
/// or reordered, the frame only carries one more event. It bounds a push's
/// work while the main thread is held up and many streams' events pile up.
const MERGE_WINDOW: usize = 32;

/// Appends the text of `event` to `last` when both are streamed text of the
/// same kind (a text delta, or an agent message or thought chunk with no
/// `_meta`); gives `event` back otherwise.
fn merge_text(last: &mut Event, event: Event) -> Result<(), Event> {
    match (last, event) {
        (
            Event::Delta {
                delta: Delta::Text { text: acc },
                ..
            },
            Event::Delta {
                delta: Delta::Text { text },
                ..
            },
        ) => {
            acc.push_str(&text);
            Ok(())
        }
        (Event::Update { update: acc, .. }, Event::Update { stream, update })
            if chunk_text(acc).is_some() && same_kind(acc, &update) =>
        {
            match (chunk_text_mut(acc), chunk_text(&update)) {
                (Some(acc_text), Some(text)) => {
                    acc_text.push_str(text);
                    Ok(())
                }
                _ => Err(Event::Update { stream, update }),
            }
        }
        (_, event) => Err(event),
    }
}

/// The text of an agent message or thought chunk.
fn chunk_text(update: &acp::SessionUpdate) -> Option<&str> {
    match update {
        acp::SessionUpdate::AgentMessageChunk(c) | acp::SessionUpdate::AgentThoughtChunk(c) => match &c.content {
            acp::ContentBlock::Text(t) if c.meta.is_none() => Some(t.text.as_str()),
            _ => None,
        },
        _ => None,
    }
}

fn chunk_text_mut(update: &mut acp::SessionUpdate) -> Option<&mut String> {
    match update {
        acp::SessionUpdate::AgentMessageChunk(c) | acp::SessionUpdate::AgentThoughtChunk(c) => match &mut c.content {
            acp::ContentBlock::Text(t) => Some(&mut t.text),
            _ => None,
        },
        _ => None,
    }
}

fn same_kind(a: &acp::SessionUpdate, b: &acp::SessionUpdate) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// A file descriptor the main loop can poll: readable while a wake is pending.
#[derive(Debug)]
pub struct WakeFd {
    read_fd: libc::c_int,
    write_fd: libc::c_int,
}

impl WakeFd {
    /// An eventfd on Linux; elsewhere a pipe whose both ends Rust keeps
    /// (a pipe whose read end only libuv holds can raise SIGPIPE at exit).
    pub fn new() -> io::Result<Self> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: plain syscall, result checked.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(WakeFd {
                read_fd: fd,
                write_fd: fd,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let mut fds = [0 as libc::c_int; 2];
            // SAFETY: fds has room for two descriptors; result checked.
            if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            for fd in fds {
                // SAFETY: fd was just created by pipe().
                unsafe {
                    libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
            Ok(WakeFd {
                read_fd: fds[0],
                write_fd: fds[1],
            })
        }
    }

    /// The descriptor to watch for readability.
    pub fn fd(&self) -> libc::c_int {
        self.read_fd
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own descriptor. A full
        // pipe/eventfd (EAGAIN) already means "readable", which is all we need.
        unsafe {
            libc::write(self.write_fd, (&one as *const u64).cast(), 8);
        }
    }

    fn clear(&self) {
        let mut buf = [0u8; 64];
        // SAFETY: reads into a live buffer from our own non-blocking
        // descriptor. One read resets an eventfd; a pipe is read until empty.
        let mut read = || unsafe { libc::read(self.read_fd, buf.as_mut_ptr().cast(), buf.len()) };
        if cfg!(target_os = "linux") {
            read();
        } else {
            while read() > 0 {}
        }
    }
}

impl Drop for WakeFd {
    fn drop(&mut self) {
        // SAFETY: closing descriptors this struct owns.
        unsafe {
            libc::close(self.read_fd);
            if self.write_fd != self.read_fd {
                libc::close(self.write_fd);
            }
        }
    }
}

/// The shortest time between two drains that write streamed text: two 60 Hz
/// display frames. Each such drain costs a buffer change and a redraw of the
/// line it grows; 30 a second keeps every gap between visible updates under
/// 40 ms (benches/stream_bench.py).
pub const FRAME: Duration = Duration::from_millis(33);

/// True for the events a frame is about: streamed text and reasoning.
fn is_text(event: &Event) -> bool {
    match event {
        Event::Delta { delta, .. } => matches!(delta, Delta::Text { .. } | Delta::Reasoning { .. }),
        Event::Update { update, .. } => matches!(
            update.as_ref(),
            acp::SessionUpdate::AgentMessageChunk(_) | acp::SessionUpdate::AgentThoughtChunk(_)
        ),
        _ => false,
    }
}

/// True for the running figures of an answer still streaming (a
/// `usage_update` with `_meta.mia.live`, `session::updates::live_usage`):
/// each one replaces the last, whatever text came between.
pub fn is_live_usage(event: &Event) -> bool {
    match event {
        Event::Update { update, .. } => match update.as_ref() {
            acp::SessionUpdate::UsageUpdate(u) => u
                .meta
                .as_ref()
                .and_then(|m| m.get("mia"))
                .and_then(|m| m.get("live"))
                .is_some_and(|live| live == true),
            _ => false,
        },
        _ => false,
    }
}

/// Multi-producer queue with one consumer (the main thread).
///
/// Streamed text is merged as it is queued: a piece joins the text before
/// it when that is the last event of its stream, so a frame's drain takes
/// one text event per stream and only swaps the list out (most frames of a
/// stream: one event). Order within a stream is kept, but for live figures
/// (text may join text queued before them); other streams' events in
/// between do not matter, any other event of the same stream does.
#[derive(Debug)]
pub struct EventQueue {
    pending: Mutex<Vec<Event>>,
    /// When the last drain that took streamed text ran (main thread only).
    last_text: Mutex<Option<Instant>>,
    /// True from the wake signal until the consumer starts a drain.
    wake_pending: AtomicBool,
    /// Set by events that someone waits on (calls into Lua): the main thread
    /// drains them at once instead of at the next frame.
    urgent: AtomicBool,
    wake: WakeFd,
}

impl EventQueue {
    pub fn new() -> io::Result<Self> {
        Ok(EventQueue {
            pending: Mutex::new(Vec::new()),
            last_text: Mutex::new(None),
            wake_pending: AtomicBool::new(false),
            urgent: AtomicBool::new(false),
            wake: WakeFd::new()?,
        })
    }

    /// The descriptor the main loop polls.
    pub fn fd(&self) -> libc::c_int {
        self.wake.fd()
    }

    /// Queues `event`; signals the wake fd only if no wake is outstanding.
    /// A call into Lua, or the end of a job or stream (someone waits on it),
    /// signals even when a wake is pending, so the main thread drains it
    /// before the next frame. Only streamed text waits for the frame.
    pub fn push(&self, event: Event) {
        let urgent = matches!(
            event,
            Event::Call { .. }
                | Event::Abort { .. }
                | Event::Result { .. }
                | Event::Done { .. }
                | Event::Error { .. }
                | Event::End { .. }
        );
        if urgent {
            self.urgent.store(true, Ordering::SeqCst);
        }
        {
            let mut pending = self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let stream = event.stream();
            let start = pending.len().saturating_sub(MERGE_WINDOW);
            let text = is_text(&event);
            // Text looks past the stream's live figures: they are redrawn
            // whole each time, so the text before them may take this piece.
            let last = pending[start..]
                .iter_mut()
                .rev()
                .find(|e| e.stream() == stream && !(text && is_live_usage(e)));
            let event = match last {
                Some(last) if text => merge_text(last, event),
                _ => Err(event),
            };
            if let Err(event) = event {
                pending.push(event);
            }
        }
        if !self.wake_pending.swap(true, Ordering::SeqCst) || urgent {
            self.wake.signal();
        }
    }

    /// Resets the wake fd so a level-triggered poll stops firing. Does not
    /// touch the queue: events stay until `drain`. Returns true when an
    /// urgent event (a call someone waits on) is among them.
    pub fn ack(&self) -> bool {
        self.wake.clear();
        self.urgent.swap(false, Ordering::SeqCst)
    }

    /// Takes every pending event (text already merged by `push`). Re-arms
    /// the wake before taking, so an event pushed during the drain either is
    /// taken now or wakes again.
    pub fn drain(&self) -> Vec<Event> {
        self.wake_pending.store(false, Ordering::SeqCst);
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Takes every pending event (text merged) and paces the frames: when
    /// streamed text was taken less than [`FRAME`] ago (now included), the
    /// wake stays off and the answer is how long until the next frame's
    /// drain, which the caller must then run (a timer). Until it does, only
    /// urgent events signal: between frames the main thread wakes once per
    /// frame, not once for the text and again for a frame timer.
    pub fn drain_paced(&self, now: Instant) -> (Vec<Event>, Option<Duration>) {
        let events = self.drain();
        let mut last_text = self.last_text.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if events.iter().any(is_text) {
            *last_text = Some(now);
        }
        let next = last_text
            .map(|at| (at + FRAME).saturating_duration_since(now))
            .filter(|wait| !wait.is_zero());
        if next.is_some() {
            // Any event pushed since the drain re-armed the wake has either
            // signalled (an extra wake, harmless) or waits for that drain.
            self.wake_pending.store(true, Ordering::SeqCst);
        }
        (events, next)
    }

    /// True while a wake is outstanding (for tests).
    pub fn wake_pending(&self) -> bool {
        self.wake_pending.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn text(stream: StreamId, t: &str) -> Event {
        Event::Delta {
            stream,
            delta: Delta::Text { text: t.into() },
        }
    }

    fn usage(stream: StreamId) -> Event {
        Event::Delta {
            stream,
            delta: Delta::Usage {
                usage: Default::default(),
            },
        }
    }

    fn readable(fd: libc::c_int) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, zero timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn text_of_one_stream_is_merged_in_order_across_other_streams() {
        let q = EventQueue::new().unwrap();
        let usage = usage(1);
        for e in [
            text(1, "a"),
            text(2, "x"),
            text(1, "b"),
            usage.clone(),
            text(1, "c"),
            text(2, "y"),
        ] {
            q.push(e);
        }
        assert_eq!(q.drain(), vec![text(1, "ab"), text(2, "xy"), usage, text(1, "c")]);
        q.push(text(1, "d"));
        assert_eq!(q.drain(), vec![text(1, "d")], "a drain ends the merging");
    }

    fn chunk(stream: StreamId, kind: &str, t: &str) -> Event {
        let c = acp::ContentChunk::new(acp::ContentBlock::from(t.to_string()));
        let update = match kind {
            "message" => acp::SessionUpdate::AgentMessageChunk(c),
            "thought" => acp::SessionUpdate::AgentThoughtChunk(c),
            _ => acp::SessionUpdate::UserMessageChunk(c),
        };
        Event::Update {
            stream,
            update: Box::new(update),
        }
    }

    #[test]
    fn answer_chunks_merge_only_with_plain_chunks_of_their_kind() {
        let q = EventQueue::new().unwrap();
        let mut with_meta = chunk(1, "message", "m");
        if let Event::Update { update, .. } = &mut with_meta {
            if let acp::SessionUpdate::AgentMessageChunk(c) = update.as_mut() {
                c.meta = Some(serde_json::Map::new());
            }
        }
        for e in [
            chunk(1, "message", "a"),
            chunk(2, "message", "x"),
            chunk(1, "message", "b"),
            chunk(1, "thought", "t"),
            chunk(1, "thought", "u"),
            chunk(1, "message", "c"),
            with_meta.clone(),
            chunk(1, "message", "d"),
            chunk(1, "user", "p"),
            chunk(1, "user", "q"),
            text(1, "e"),
        ] {
            q.push(e);
        }
        assert_eq!(
            q.drain(),
            vec![
                chunk(1, "message", "ab"),
                chunk(2, "message", "x"),
                chunk(1, "thought", "tu"),
                chunk(1, "message", "c"),
                with_meta,
                chunk(1, "message", "d"),
                chunk(1, "user", "p"),
                chunk(1, "user", "q"),
                text(1, "e"),
            ]
        );
    }

    fn live(stream: StreamId, live: bool) -> Event {
        let u = crate::session::updates::live_usage(&Default::default(), &Default::default(), 1, 2, 0.5);
        let u = if live {
            u
        } else {
            crate::session::updates::usage(&Default::default(), &Default::default(), 2, 0.5, None)
        };
        Event::Update {
            stream,
            update: Box::new(u),
        }
    }

    #[test]
    fn text_joins_the_text_queued_before_live_figures_only() {
        let q = EventQueue::new().unwrap();
        assert!(is_live_usage(&live(1, true)) && !is_live_usage(&live(1, false)));
        for e in [
            chunk(1, "message", "a"),
            live(1, true),
            chunk(2, "message", "x"),
            chunk(1, "message", "b"),
            live(1, false),
            chunk(1, "message", "c"),
        ] {
            q.push(e);
        }
        assert_eq!(
            q.drain(),
            vec![
                chunk(1, "message", "ab"),
                live(1, true),
                chunk(2, "message", "x"),
                live(1, false),
                chunk(1, "message", "c"),
            ],
            "the final figures keep their place"
        );
        q.push(live(1, true));
        q.push(chunk(1, "message", "d"));
        q.push(chunk(1, "message", "e"));
        assert_eq!(q.drain(), vec![live(1, true), chunk(1, "message", "de")]);
    }

    #[test]
    fn text_far_behind_other_streams_events_is_queued_on_its_own() {
        let q = EventQueue::new().unwrap();
        q.push(text(1, "a"));
        for i in 0..MERGE_WINDOW as u64 {
            q.push(text(100 + i, "x"));
        }
        q.push(text(1, "b"));
        let events = q.drain();
        assert_eq!(events.len(), MERGE_WINDOW + 2, "no merge past the window");
        assert_eq!(events[0], text(1, "a"));
        assert_eq!(events[MERGE_WINDOW + 1], text(1, "b"), "order kept");
    }

    #[test]
    fn only_the_first_push_signals_until_drained() {
        let q = EventQueue::new().unwrap();
        assert!(!readable(q.fd()));
        q.push(text(1, "a"));
        assert!(readable(q.fd()));
        q.ack();
        assert!(!readable(q.fd()), "ack clears the fd");
        q.push(text(1, "b"));
        assert!(
            !readable(q.fd()),
            "a second push while a wake is pending does not signal"
        );
        assert_eq!(q.drain(), vec![text(1, "ab")]);
        assert!(!q.wake_pending());
        q.push(text(1, "c"));
        assert!(readable(q.fd()), "after a drain the next push wakes again");
    }

    #[test]
    fn after_a_text_drain_only_the_next_frames_drain_takes_more_text() {
        let q = EventQueue::new().unwrap();
        let t0 = Instant::now();
        q.push(text(1, "a"));
        q.ack();
        let (events, next) = q.drain_paced(t0);
        assert_eq!(events, vec![text(1, "a")]);
        assert_eq!(next, Some(FRAME), "the next frame is a whole frame away");
        q.push(text(1, "b"));
        assert!(
            !readable(q.fd()),
            "text within the frame wakes nobody: the timer's drain takes it"
        );
        let usage = usage(1);
        q.push(usage.clone());
        assert!(!readable(q.fd()), "nor does other streamed news");
        q.push(Event::Result {
            stream: 2,
            value: serde_json::Value::Null,
        });
        assert!(readable(q.fd()), "the end of a job wakes at once");
        assert!(q.ack());

        // An early drain (the urgent one) keeps the frame: what is left of it comes back.
        let mid = t0 + FRAME / 3;
        let (events, next) = q.drain_paced(mid);
        assert_eq!(events.len(), 3, "{events:?}");
        assert_eq!(next, Some(FRAME), "the text it took starts a new frame");
        let (events, next) = q.drain_paced(mid + FRAME / 2);
        assert!(events.is_empty());
        assert_eq!(next, Some(FRAME - FRAME / 2));
        q.push(text(1, "c"));
        assert!(!readable(q.fd()));

        // At the frame's time the timer's drain takes the text and paces on.
        let (events, next) = q.drain_paced(mid + FRAME);
        assert_eq!(events, vec![text(1, "c")]);
        assert_eq!(next, Some(FRAME));
        // A frame with no text ends the pacing: the next text wakes at once.
        let (events, next) = q.drain_paced(mid + 2 * FRAME);
        assert!(events.is_empty() && next.is_none());
        assert!(!q.wake_pending());
        q.push(text(1, "d"));
        assert!(readable(q.fd()), "the first text after a quiet frame wakes at once");
    }

    #[test]
    fn a_drain_without_text_does_not_pace() {
        let q = EventQueue::new().unwrap();
        q.push(usage(1));
        q.ack();
        let (events, next) = q.drain_paced(Instant::now());
        assert_eq!(events.len(), 1);
        assert!(next.is_none());
        q.push(text(1, "a"));
        assert!(readable(q.fd()));
    }

    #[test]
    fn a_call_into_lua_wakes_even_while_a_wake_is_pending_and_is_flagged_urgent() {
        let q = EventQueue::new().unwrap();
        q.push(text(1, "a"));
        assert!(!q.ack(), "text is not urgent");
        q.push(Event::Call {
            stream: 1,
            call: 9,
            request: Box::new(EditorCall::Hook(serde_json::Value::Null)),
        });
        assert!(
            readable(q.fd()),
            "the call signals although the text's wake is still pending"
        );
        assert!(q.ack(), "ack reports the urgent call");
        assert!(!q.ack(), "the flag is cleared by the ack that saw it");
        assert_eq!(q.drain().len(), 2);
    }

    #[test]
    fn concurrent_producers_lose_nothing() {
        let q = std::sync::Arc::new(EventQueue::new().unwrap());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let q = q.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        q.push(text(t, &format!("{i},")));
                    }
                })
            })
            .collect();
        let mut got: HashMap<StreamId, String> = HashMap::new();
        let mut finished = false;
        while !finished {
            finished = threads.iter().all(|t| t.is_finished());
            for e in q.drain() {
                if let Event::Delta {
                    stream,
                    delta: Delta::Text { text },
                } = e
                {
                    got.entry(stream).or_default().push_str(&text);
                }
            }
        }
        for e in q.drain() {
            if let Event::Delta {
                stream,
                delta: Delta::Text { text },
            } = e
            {
                got.entry(stream).or_default().push_str(&text);
            }
        }
        let expected: String = (0..1000).map(|i| format!("{i},")).collect();
        for t in 0..4 {
            assert_eq!(got[&t], expected, "stream {t}");
        }
    }
}
