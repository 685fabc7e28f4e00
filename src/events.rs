//! The one road from the runtime to Neovim's main thread: an event queue and
//! a wake file descriptor that is signalled only when the queue goes from
//! empty to non-empty, so at most one wake is ever outstanding.
//!
//! Producers (runtime tasks) call [`EventQueue::push`]; the main thread's
//! poll watcher calls [`EventQueue::ack`] and later [`EventQueue::drain`].

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use agent_client_protocol_schema::v1 as acp;
use serde::Serialize;

use crate::llm::delta::{Delta, StreamDone};
use crate::llm::error::{ErrorClass, LlmError};
use crate::session::TurnEnd;

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
        kind: String,
        payload: serde_json::Value,
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
        source: crate::tools::registry::ToolSource,
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

/// Merges the text deltas of each stream that follow each other within one
/// drain (other streams' events in between do not matter; any other event of
/// the same stream does), so the main thread handles one text piece per
/// stream per frame instead of one per network chunk. Order within a stream
/// is kept.
pub fn coalesce(events: Vec<Event>) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::with_capacity(events.len().min(64));
    // stream -> index in `out` of its last event, if that event is text.
    let mut open_text: HashMap<StreamId, usize> = HashMap::new();
    for event in events {
        let stream = event.stream();
        match event {
            Event::Delta {
                delta: Delta::Text { text },
                ..
            } => {
                if let Some(&i) = open_text.get(&stream) {
                    if let Event::Delta {
                        delta: Delta::Text { text: acc },
                        ..
                    } = &mut out[i]
                    {
                        acc.push_str(&text);
                        continue;
                    }
                }
                open_text.insert(stream, out.len());
                out.push(Event::Delta {
                    stream,
                    delta: Delta::Text { text },
                });
            }
            Event::Update { update, .. } if chunk_text(&update).is_some() => {
                if let Some(&i) = open_text.get(&stream) {
                    if let Event::Update { update: acc, .. } = &mut out[i] {
                        if same_kind(acc, &update) {
                            if let (Some(acc_text), Some(text)) = (chunk_text_mut(acc), chunk_text(&update)) {
                                acc_text.push_str(text);
                                continue;
                            }
                        }
                    }
                }
                open_text.insert(stream, out.len());
                out.push(Event::Update { stream, update });
            }
            other => {
                open_text.remove(&stream);
                out.push(other);
            }
        }
    }
    out
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

/// Multi-producer queue with one consumer (the main thread).
#[derive(Debug)]
pub struct EventQueue {
    tx: Sender<Event>,
    rx: Mutex<Receiver<Event>>,
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
        let (tx, rx) = channel();
        Ok(EventQueue {
            tx,
            rx: Mutex::new(rx),
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
        if self.tx.send(event).is_err() {
            return; // the receiver lives as long as the queue: cannot happen
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

    /// Takes every pending event, coalesced. Re-arms the wake before taking,
    /// so an event pushed during the drain either is taken now or wakes again.
    pub fn drain(&self) -> Vec<Event> {
        self.wake_pending.store(false, Ordering::SeqCst);
        let rx = self.rx.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let raw: Vec<Event> = rx.try_iter().collect();
        coalesce(raw)
    }

    /// Takes every pending event, coalesced, and paces the frames: when
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
        let usage = usage(1);
        let out = coalesce(vec![
            text(1, "a"),
            text(2, "x"),
            text(1, "b"),
            usage.clone(),
            text(1, "c"),
            text(2, "y"),
        ]);
        assert_eq!(out, vec![text(1, "ab"), text(2, "xy"), usage, text(1, "c")]);
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
            kind: "tool".into(),
            payload: serde_json::Value::Null,
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
