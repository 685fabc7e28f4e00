//! Rate-limit windows announced in response headers, and every other wait a
//! server can ask for. When a provider says a window is exhausted
//! (`x-ratelimit-remaining-*: 0`, or a format's own family of headers), the
//! next request to that provider waits for the reset instead of earning a
//! 429 — unless the reset is further away than `retry.max_wait_ms`, in which
//! case the request is refused at once with [`over_cap_error`].
//!
//! Server values are never trusted: every parser here rejects NaN, negative
//! and garbage values (`None`, the header is ignored) and saturates huge ones
//! at [`LONGEST_WAIT`], so no header can panic or overflow the arithmetic.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::HeaderMap;

use super::error::{ErrorClass, LlmError};

/// Any server-requested wait longer than this is treated as this long: far
/// beyond any sane `retry.max_wait_ms`, and small enough that `Instant` and
/// `SystemTime` arithmetic on it cannot overflow.
pub const LONGEST_WAIT: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

/// Per-provider "do not send before" instants and request windows, keyed by
/// provider name: one provider's window never holds up another.
#[derive(Debug, Default)]
pub struct RateLimits {
    blocked_until: Mutex<HashMap<String, Instant>>,
    windows: Mutex<HashMap<String, Window>>,
    /// Requests sent and not answered yet, by provider: a response's count
    /// may not include them yet, so what is left is taken as that much less.
    in_flight: Mutex<HashMap<String, u64>>,
}

/// What a provider last said of its request window, counted down locally
/// for each request sent since (responses arrive after later requests left).
#[derive(Debug, Clone, Copy)]
struct Window {
    remaining: u64,
    limit: Option<u64>,
    reset_at: Instant,
    /// When the next paced request may go.
    next_slot: Instant,
}

/// What `headers` say of the request window: requests left, the window's
/// size if given, and the time until it resets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowInfo {
    pub remaining: u64,
    pub limit: Option<u64>,
    pub reset: Duration,
}

/// Pacing starts when at most this share of the window is left ...
const LOW_SHARE: f64 = 0.25;
/// ... or, when the window's size is not given, at most this many requests.
const LOW_COUNT: u64 = 5;
/// Only windows that reset within this are paced (per-minute request
/// limits); a daily quota running low is left to the server.
const PACE_HORIZON: Duration = Duration::from_secs(60);

/// Why a request waits before it is sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Hold {
    /// The window is used up: wait for its reset.
    Exhausted(Duration),
    /// The window runs low: this request's turn comes after this.
    Paced(Duration),
}

impl RateLimits {
    /// A request to `provider` leaves (its answer comes to `observe`, or
    /// `unanswered` when none comes).
    pub fn sent(&self, provider: &str) {
        let mut map = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry(provider.to_string()).or_default() += 1;
    }

    /// A request to `provider` failed before any response.
    pub fn unanswered(&self, provider: &str) {
        self.settle(provider);
    }

    /// One request fewer in flight; how many others still are.
    fn settle(&self, provider: &str) -> u64 {
        let mut map = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(provider.to_string()).or_default();
        *n = n.saturating_sub(1);
        *n
    }

    /// Records what the response `headers` say about `provider`'s window.
    /// `own` are the header families of its wire format.
    pub fn observe(&self, provider: &str, headers: &HeaderMap, own: &[WindowHeaders]) {
        let others = self.settle(provider);
        if let Some(wait) = exhausted_window(headers, own, SystemTime::now()) {
            self.block(provider, wait);
        }
        if let Some(mut info) = request_window(headers, own, SystemTime::now()) {
            info.remaining = info.remaining.saturating_sub(others);
            self.note_window(provider, info, Instant::now());
        }
    }

    fn note_window(&self, provider: &str, info: WindowInfo, now: Instant) {
        let Some(reset_at) = now.checked_add(info.reset.min(LONGEST_WAIT)) else {
            return;
        };
        let mut map = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        match map.get_mut(provider) {
            // The same window: the lower count wins (requests sent since
            // this response left the server are already counted here).
            Some(w) if reset_at <= w.reset_at + Duration::from_secs(1) && w.reset_at > now => {
                w.remaining = w.remaining.min(info.remaining);
                w.limit = info.limit.or(w.limit);
            }
            _ => {
                map.insert(
                    provider.to_string(),
                    Window {
                        remaining: info.remaining,
                        limit: info.limit,
                        reset_at,
                        next_slot: now,
                    },
                );
            }
        }
    }

    /// Holds requests to `provider` back for `wait` (longer holds win).
    pub fn block(&self, provider: &str, wait: Duration) {
        let now = Instant::now();
        let Some(until) = now
            .checked_add(wait.min(LONGEST_WAIT))
            .or_else(|| now.checked_add(Duration::from_secs(24 * 3600)))
        else {
            return;
        };
        let mut map = self.blocked_until.lock().unwrap_or_else(|p| p.into_inner());
        let slot = map.entry(provider.to_string()).or_insert(until);
        if *slot < until {
            *slot = until;
        }
    }

    /// How long a request to `provider` must still wait, if at all: until
    /// an exhausted window resets, and with `pacing`, its share of what is
    /// left of a window that is running low (the requests left spread
    /// evenly until the reset instead of running into 429s). Each call
    /// counts as one request sent.
    pub fn wait_for(&self, provider: &str, pacing: bool) -> Option<Hold> {
        let now = Instant::now();
        {
            let mut map = self.blocked_until.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(until) = map.get(provider).copied() {
                if until > now {
                    return Some(Hold::Exhausted(until.saturating_duration_since(now)));
                }
                map.remove(provider);
            }
        }
        if !pacing {
            return None;
        }
        self.paced(provider, now)
    }

    fn paced(&self, provider: &str, now: Instant) -> Option<Hold> {
        let mut map = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let w = map.get_mut(provider)?;
        if w.reset_at <= now {
            map.remove(provider);
            return None;
        }
        let left = w.reset_at.saturating_duration_since(now);
        if left > PACE_HORIZON {
            return None;
        }
        if w.remaining == 0 {
            // Used up by requests sent since the last response: wait for the reset.
            return Some(Hold::Exhausted(left));
        }
        let low = match w.limit {
            Some(limit) if limit > 0 => (w.remaining as f64) <= limit as f64 * LOW_SHARE,
            _ => w.remaining <= LOW_COUNT,
        };
        let spacing = left / u32::try_from(w.remaining).unwrap_or(u32::MAX);
        w.remaining -= 1;
        if !low {
            return None;
        }
        let slot = w.next_slot.max(now);
        w.next_slot = slot + spacing;
        Some(slot.saturating_duration_since(now))
            .filter(|d| !d.is_zero())
            .map(Hold::Paced)
    }

    /// What is known of `provider`'s request window now (for `health_check`).
    pub fn snapshot(&self, provider: &str) -> Option<WindowInfo> {
        let now = Instant::now();
        let map = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let w = map.get(provider).filter(|w| w.reset_at > now)?;
        Some(WindowInfo {
            remaining: w.remaining,
            limit: w.limit,
            reset: w.reset_at.saturating_duration_since(now),
        })
    }
}

/// How a family of headers writes its reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetFormat {
    /// A duration like `1s`, `6m0s`, `20ms` (a bare number is seconds).
    Duration,
    /// An RFC 3339 time.
    Rfc3339,
    /// Seconds, a duration, or (a number past 10^9) a Unix time.
    SecondsOrUnix,
}

/// Where a family of headers puts a window's remaining count, its size and
/// its reset. A wire format names its own families
/// ([`super::wire::WireFormat::rate_limit_headers`]); [`GENERIC_HEADERS`]
/// are read for every provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowHeaders {
    pub remaining: &'static str,
    pub limit: &'static str,
    pub reset: &'static str,
    pub reset_format: ResetFormat,
    /// Whether the window counts requests (the one pacing follows) rather
    /// than tokens; any exhausted window holds the next request.
    pub requests: bool,
}

/// The families most servers send: OpenAI's `x-ratelimit-*-{requests,tokens}`
/// and the generic `x-ratelimit-{remaining,limit,reset}`.
pub const GENERIC_HEADERS: &[WindowHeaders] = &[
    WindowHeaders {
        remaining: "x-ratelimit-remaining-requests",
        limit: "x-ratelimit-limit-requests",
        reset: "x-ratelimit-reset-requests",
        reset_format: ResetFormat::Duration,
        requests: true,
    },
    WindowHeaders {
        remaining: "x-ratelimit-remaining-tokens",
        limit: "x-ratelimit-limit-tokens",
        reset: "x-ratelimit-reset-tokens",
        reset_format: ResetFormat::Duration,
        requests: false,
    },
    WindowHeaders {
        remaining: "x-ratelimit-remaining",
        limit: "x-ratelimit-limit",
        reset: "x-ratelimit-reset",
        reset_format: ResetFormat::SecondsOrUnix,
        requests: true,
    },
];

impl ResetFormat {
    /// How long until the reset `text` names; unreadable values give `None`.
    fn parse(self, text: &str, now: SystemTime) -> Option<Duration> {
        match self {
            ResetFormat::Duration => parse_go_duration(text),
            ResetFormat::Rfc3339 => until_rfc3339(text, now),
            // A number far beyond any window's length is a Unix time.
            ResetFormat::SecondsOrUnix => match parse_number(text) {
                Some(n) if n > 1.0e9 => {
                    let at = time::OffsetDateTime::from_unix_timestamp(n.min(1.0e11) as i64).ok()?;
                    until_datetime(at, now)
                }
                _ => parse_go_duration(text),
            },
        }
    }
}

/// The families a response of a format with `own` families is read with:
/// its own first, then the generic ones.
fn families(own: &[WindowHeaders]) -> impl Iterator<Item = &WindowHeaders> {
    own.iter().chain(GENERIC_HEADERS)
}

/// The request window `headers` describe, if they do: the format's own
/// families (`own`) first, then [`GENERIC_HEADERS`]. Unreadable values
/// leave the window unknown.
pub fn request_window(headers: &HeaderMap, own: &[WindowHeaders], now: SystemTime) -> Option<WindowInfo> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let count = |name: &str| get(name).and_then(|v| v.parse::<u64>().ok());
    families(own).filter(|f| f.requests).find_map(|f| {
        Some(WindowInfo {
            remaining: count(f.remaining)?,
            limit: count(f.limit),
            reset: get(f.reset).and_then(|t| f.reset_format.parse(t, now))?,
        })
    })
}

/// The longest wait any exhausted window in `headers` asks for (at most
/// [`LONGEST_WAIT`]); windows whose reset cannot be read are ignored.
pub fn exhausted_window(headers: &HeaderMap, own: &[WindowHeaders], now: SystemTime) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    families(own)
        .filter(|f| get(f.remaining) == Some("0"))
        .filter_map(|f| get(f.reset).and_then(|t| f.reset_format.parse(t, now)))
        .max()
}

/// A wait of `secs` seconds from a server: `None` for NaN or negative
/// values, [`LONGEST_WAIT`] for anything longer (infinity included).
pub fn wait_from_secs(secs: f64) -> Option<Duration> {
    if secs.is_nan() || secs < 0.0 {
        return None;
    }
    if secs >= LONGEST_WAIT.as_secs_f64() {
        return Some(LONGEST_WAIT);
    }
    Duration::try_from_secs_f64(secs).ok()
}

/// A plain decimal number of seconds (`retry-after: 2`, `"1.5"`, `"1e308"`),
/// as [`wait_from_secs`] bounds it.
pub fn parse_seconds(text: &str) -> Option<Duration> {
    wait_from_secs(parse_number(text)?)
}

/// A non-negative decimal number (`"2"`, `"1.5"`, `"1e308"`), or `None`.
/// f64's own parser also takes signs, `"inf"` and `"NaN"`: a server saying
/// that means nothing usable.
pub fn parse_number(text: &str) -> Option<f64> {
    let text = text.trim();
    if !text.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    text.parse::<f64>().ok().filter(|x| !x.is_nan())
}

/// Parses durations like `"1s"`, `"6m0s"`, `"20ms"`, `"1h2m3.5s"` (a bare
/// number is seconds). Signs, unknown units and garbage give `None`; huge
/// values saturate at [`LONGEST_WAIT`].
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut total = 0.0f64;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return None;
        }
        let value: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" | "" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return None,
        };
        // Non-negative terms only: the sum can reach infinity, never NaN.
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    wait_from_secs(total)
}

/// How long until the RFC 3339 time `text` (zero when it is past).
fn until_rfc3339(text: &str, now: SystemTime) -> Option<Duration> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    until_datetime(at, now)
}

/// How long until the HTTP date `text` (`Wed, 21 Oct 2015 07:28:00 GMT`), zero when past.
pub fn until_http_date(text: &str, now: SystemTime) -> Option<Duration> {
    let at = time::OffsetDateTime::parse(text.trim(), &time::format_description::well_known::Rfc2822).ok()?;
    until_datetime(at, now)
}

fn until_datetime(at: time::OffsetDateTime, now: SystemTime) -> Option<Duration> {
    let now = time::OffsetDateTime::from(now);
    let ahead = at - now;
    if ahead.is_negative() {
        return Some(Duration::ZERO);
    }
    Some(
        Duration::try_from(ahead)
            .ok()
            .map_or(LONGEST_WAIT, |d| d.min(LONGEST_WAIT)),
    )
}

/// A wait as people say it: `"45 s"`, `"12 min"`, `"3 h 20 min"`, `"41 days"`.
pub fn human_wait(d: Duration) -> String {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    match secs {
        0..=119 => format!("{secs} s"),
        120..=7199 => format!("{} min", secs.div_ceil(60)),
        7200..=172_799 => match (secs / 3600, secs % 3600 / 60) {
            (h, 0) => format!("{h} h"),
            (h, m) => format!("{h} h {m} min"),
        },
        _ => format!("{} days", secs / 86_400),
    }
}

/// When a wait of `wait` from `now` ends, in words: `"in 41 days (at
/// 2027-01-10 14:00 UTC)"`.
pub fn when(wait: Duration, now: SystemTime) -> String {
    // A saturated wait, maybe a little elapsed since it was recorded.
    if wait >= LONGEST_WAIT.saturating_sub(Duration::from_secs(24 * 3600)) {
        return "in more than 10 years (an implausible time)".to_string();
    }
    let at = now
        .checked_add(wait)
        .map(time::OffsetDateTime::from)
        .map(|t| {
            format!(
                " (at {:04}-{:02}-{:02} {:02}:{:02} UTC)",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute()
            )
        })
        .unwrap_or_default();
    format!("in {}{at}", human_wait(wait))
}

/// What the user can do about a wait longer than the cap.
const OVER_CAP_FIX: &str = "Wait until then, raise retry.max_wait_ms in setup(), or switch to another model.";

fn cap_text(cap_ms: u64) -> String {
    format!(
        "retry.max_wait_ms allows waiting only {} ({cap_ms} ms)",
        human_wait(Duration::from_millis(cap_ms))
    )
}

/// The error for a request held back by an exhausted window whose reset is
/// further away than `cap_ms`: the request is not sent.
pub fn window_over_cap(provider: &str, wait: Duration, cap_ms: u64) -> LlmError {
    let mut err = LlmError::new(
        ErrorClass::RateLimit,
        Some(provider),
        format!(
            "{provider}: the rate-limit window is used up and resets {}; {}, so the request was not sent. {OVER_CAP_FIX}",
            when(wait, SystemTime::now()),
            cap_text(cap_ms)
        ),
    );
    err.retryable = false;
    err.retry_after_ms = Some(duration_ms(wait));
    err
}

/// `err` (a failure whose server asked to wait `wait`, more than `cap_ms`)
/// turned final: it says when to come back and what to do.
pub fn retry_after_over_cap(mut err: LlmError, wait: Duration, cap_ms: u64) -> LlmError {
    let base = err
        .message
        .strip_suffix(super::error::RATE_LIMIT_ADVICE)
        .unwrap_or(&err.message)
        .trim_end();
    err.message = format!(
        "{base} The server says to retry {}; {}, so mia does not retry. {OVER_CAP_FIX}",
        when(wait, SystemTime::now()),
        cap_text(cap_ms)
    );
    err.retryable = false;
    err.retry_after_ms = Some(duration_ms(wait));
    err
}

/// Whole milliseconds, saturating (a `Duration` can hold more than `u64` ms).
pub fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Anthropic's families, read as a response of that format is.
    const OWN: &[WindowHeaders] = crate::anthropic::RATE_LIMIT_HEADERS;
    use proptest::prelude::*;
    use reqwest::header::HeaderValue;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn go_durations_parse_and_absurd_ones_are_bounded_or_ignored() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("1s", Some(S(1))),
            ("6m0s", Some(S(360))),
            ("6m0.5s", Some(Duration::from_millis(360_500))),
            ("20ms", Some(Duration::from_millis(20))),
            ("1h2m3.5s", Some(Duration::from_millis(3_723_500))),
            ("1µs", Some(Duration::from_micros(1))),
            ("0s", Some(Duration::ZERO)),
            ("7", Some(S(7))),
            (" 2s ", Some(S(2))),
            ("1000h", Some(S(3_600_000))),
            ("99999999999999999999h", Some(LONGEST_WAIT)),
            ("1e308", None),
            ("-5", None),
            ("-5s", None),
            ("NaN", None),
            ("NaNs", None),
            ("inf", None),
            ("infs", None),
            ("", None),
            ("   ", None),
            ("soon", None),
            ("5x", None),
            ("1..2s", None),
            (".", None),
            ("s", None),
            ("1h-2m", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), *want, "{text:?}");
        }
        let huge = format!("{}s", "9".repeat(400));
        assert_eq!(parse_go_duration(&huge), Some(LONGEST_WAIT));
    }

    #[test]
    fn plain_seconds_parse_and_absurd_ones_are_bounded_or_ignored() {
        let cases: &[(&str, Option<Duration>)] = &[
            ("2", Some(S(2))),
            ("1.5", Some(Duration::from_millis(1500))),
            ("0", Some(Duration::ZERO)),
            ("1e308", Some(LONGEST_WAIT)),
            ("1e400", Some(LONGEST_WAIT)),
            ("99999999999999999999", Some(LONGEST_WAIT)),
            ("-5", None),
            ("+5", None),
            ("NaN", None),
            ("inf", None),
            ("-inf", None),
            ("", None),
            ("garbage", None),
            ("5 s", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_seconds(text), *want, "{text:?}");
        }
        assert_eq!(wait_from_secs(f64::NAN), None);
        assert_eq!(wait_from_secs(-0.5), None);
        assert_eq!(wait_from_secs(f64::INFINITY), Some(LONGEST_WAIT));
        assert_eq!(wait_from_secs(f64::MAX), Some(LONGEST_WAIT));
    }

    #[test]
    fn http_dates_and_rfc3339_times_far_away_are_bounded() {
        let now = SystemTime::UNIX_EPOCH + S(1_800_000_000); // 2027-01-15T08:00:00Z
        assert_eq!(until_http_date("Fri, 15 Jan 2027 08:00:30 GMT", now), Some(S(30)));
        assert_eq!(
            until_http_date("Thu, 01 Jan 1970 00:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(until_http_date("tomorrow", now), None);
        assert_eq!(until_rfc3339("2027-01-15T09:00:03+01:00", now), Some(S(3)));
        assert_eq!(until_rfc3339("1970-01-01T00:00:00Z", now), Some(Duration::ZERO));
        assert_eq!(until_rfc3339("0000-01-01T00:00:00Z", now), Some(Duration::ZERO));
        assert_eq!(until_rfc3339("9999-12-31T23:59:59Z", now), Some(LONGEST_WAIT));
        assert_eq!(until_rfc3339("2027-13-45T99:00:00Z", now), None);
        assert_eq!(until_rfc3339("", now), None);
    }

    fn window(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_bytes(value).unwrap());
        }
        h
    }

    #[test]
    fn the_generic_headers_describe_a_window_in_seconds_a_duration_or_a_unix_time() {
        let now = SystemTime::UNIX_EPOCH + S(2_000_000_000);
        let info = |reset: &[u8]| {
            request_window(
                &window(&[
                    ("x-ratelimit-remaining", b"7"),
                    ("x-ratelimit-limit", b"20"),
                    ("x-ratelimit-reset", reset),
                ]),
                OWN,
                now,
            )
        };
        let want = |secs| {
            Some(WindowInfo {
                remaining: 7,
                limit: Some(20),
                reset: S(secs),
            })
        };
        assert_eq!(info(b"9"), want(9));
        assert_eq!(info(b"1m30s"), want(90));
        assert_eq!(info(b"2000000012"), want(12));
        assert_eq!(info(b"soon"), None);
        // The provider-specific names come first; a used-up generic window blocks like theirs.
        let both = window(&[
            ("x-ratelimit-remaining-requests", b"3"),
            ("x-ratelimit-reset-requests", b"2s"),
            ("x-ratelimit-remaining", b"50"),
            ("x-ratelimit-reset", b"60"),
        ]);
        assert_eq!(request_window(&both, OWN, now).map(|i| i.remaining), Some(3));
        let used = window(&[("x-ratelimit-remaining", b"0"), ("x-ratelimit-reset", b"4")]);
        assert_eq!(exhausted_window(&used, OWN, now), Some(S(4)));
    }

    #[test]
    fn hostile_generic_window_values_are_ignored_or_bounded() {
        let now = SystemTime::UNIX_EPOCH + S(2_000_000_000);
        let info = |remaining: &[u8], reset: &[u8]| {
            request_window(
                &window(&[("x-ratelimit-remaining", remaining), ("x-ratelimit-reset", reset)]),
                OWN,
                now,
            )
        };
        for reset in [&b"NaN"[..], b"-5", b"inf", b"1e400", b"99999999999999999999999h"] {
            if let Some(i) = info(b"3", reset) {
                assert!(i.reset <= LONGEST_WAIT, "{reset:?} gave {i:?}");
            }
        }
        assert!(info(b"1e308", b"1e308").is_none_or(|i| i.reset <= LONGEST_WAIT));
        assert_eq!(
            info(b"99999999999999999999999", b"5"),
            None,
            "a count past u64 is unknown"
        );
        assert_eq!(info(b"-1", b"5"), None);
        // A huge count with a short reset never panics the pacing arithmetic.
        let limits = RateLimits::default();
        limits.note_window(
            "p",
            WindowInfo {
                remaining: u64::MAX,
                limit: Some(u64::MAX),
                reset: S(5),
            },
            Instant::now(),
        );
        let _ = limits.wait_for("p", true);
    }

    #[test]
    fn a_window_running_low_spaces_the_requests_left_until_it_resets() {
        let limits = RateLimits::default();
        let now = Instant::now();
        let low = WindowInfo {
            remaining: 4,
            limit: Some(20),
            reset: S(8),
        };
        limits.note_window("p", low, now);
        // Four left over ~8 s: the first goes now, each later one about 2 s after the one before.
        let waits: Vec<Option<Hold>> = (0..4).map(|_| limits.paced("p", now)).collect();
        assert_eq!(waits[0], None);
        let paced: Vec<f64> = waits[1..]
            .iter()
            .map(|w| match w {
                Some(Hold::Paced(d)) => d.as_secs_f64(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(
            (paced[0] - 2.0).abs() < 0.01 && paced[1] > paced[0] && paced[2] > paced[1],
            "{paced:?}"
        );
        // None left: wait for the reset.
        assert!(matches!(limits.paced("p", now), Some(Hold::Exhausted(d)) if d == S(8)));
        // Another provider is not held up, and pacing off never waits.
        assert_eq!(limits.wait_for("q", true), None);
        assert_eq!(limits.wait_for("p", false), None);
    }

    #[test]
    fn plenty_left_or_a_far_reset_is_not_paced() {
        let limits = RateLimits::default();
        let now = Instant::now();
        limits.note_window(
            "p",
            WindowInfo {
                remaining: 15,
                limit: Some(20),
                reset: S(8),
            },
            now,
        );
        assert_eq!(limits.paced("p", now), None);
        assert_eq!(
            limits.snapshot("p").map(|i| (i.remaining, i.limit)),
            Some((14, Some(20)))
        );
        limits.note_window(
            "daily",
            WindowInfo {
                remaining: 1,
                limit: Some(1000),
                reset: S(3600),
            },
            now,
        );
        assert_eq!(limits.paced("daily", now), None);
        // A later response of the same window with a higher count does not raise it.
        limits.note_window(
            "p",
            WindowInfo {
                remaining: 19,
                limit: Some(20),
                reset: S(8),
            },
            now,
        );
        assert_eq!(limits.snapshot("p").map(|i| i.remaining), Some(14));
    }

    #[test]
    fn an_exhausted_openai_window_asks_for_its_reset() {
        let h = window(&[
            ("x-ratelimit-remaining-requests", b"0"),
            ("x-ratelimit-reset-requests", b"2s"),
            ("x-ratelimit-remaining-tokens", b"5000"),
            ("x-ratelimit-reset-tokens", b"9s"),
        ]);
        assert_eq!(exhausted_window(&h, OWN, SystemTime::now()), Some(S(2)));
    }

    #[test]
    fn absurd_window_resets_are_bounded_or_ignored() {
        let now = SystemTime::UNIX_EPOCH + S(1_800_000_000);
        let cases: &[(&[u8], Option<Duration>)] = &[
            (b"1000h", Some(S(3_600_000))),
            (b"99999999999999999999h", Some(LONGEST_WAIT)),
            (b"1e308", None),
            (b"-5", None),
            (b"NaN", None),
            (b"garbage", None),
            (b"", None),
            (b"\xff\xfe1s", None),
        ];
        for (value, want) in cases {
            let h = window(&[
                ("x-ratelimit-remaining-requests", b"0"),
                ("x-ratelimit-reset-requests", value),
            ]);
            assert_eq!(
                exhausted_window(&h, OWN, now),
                *want,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
        let h = window(&[
            ("anthropic-ratelimit-tokens-remaining", b"0"),
            ("anthropic-ratelimit-tokens-reset", b"\xff2027-01-15T08:00:03Z"),
        ]);
        assert_eq!(exhausted_window(&h, OWN, now), None);
    }

    #[test]
    fn an_exhausted_anthropic_window_waits_until_the_reset_time() {
        let now = SystemTime::UNIX_EPOCH + S(1_800_000_000);
        let h = window(&[
            ("anthropic-ratelimit-requests-remaining", b"0"),
            ("anthropic-ratelimit-requests-reset", b"2027-01-15T08:00:03Z"),
        ]);
        assert_eq!(exhausted_window(&h, OWN, now), Some(S(3)));
    }

    #[test]
    fn windows_with_room_ask_for_nothing() {
        let h = window(&[
            ("x-ratelimit-remaining-requests", b"10"),
            ("x-ratelimit-reset-requests", b"2s"),
        ]);
        assert_eq!(exhausted_window(&h, OWN, SystemTime::now()), None);
        let limits = RateLimits::default();
        limits.observe("p", &h, OWN);
        assert_eq!(limits.wait_for("p", true), None);
    }

    #[test]
    fn one_providers_window_never_holds_up_another() {
        let limits = RateLimits::default();
        let h = window(&[
            ("x-ratelimit-remaining-requests", b"0"),
            ("x-ratelimit-reset-requests", b"99999999999999999999h"),
        ]);
        limits.observe("a", &h, OWN);
        assert!(matches!(limits.wait_for("a", true), Some(Hold::Exhausted(w)) if w > S(3600)));
        assert_eq!(limits.wait_for("b", true), None);
        assert_eq!(limits.wait_for("a/", true), None);
    }

    #[test]
    fn resets_are_told_in_human_terms() {
        assert_eq!(human_wait(Duration::from_millis(300)), "1 s");
        assert_eq!(human_wait(S(45)), "45 s");
        assert_eq!(human_wait(S(120)), "2 min");
        assert_eq!(human_wait(S(3 * 3600 + 20 * 60)), "3 h 20 min");
        assert_eq!(human_wait(S(1000 * 3600)), "41 days");
        let now = SystemTime::UNIX_EPOCH + S(1_800_000_000); // 2027-01-15T08:00:00Z
        assert_eq!(when(S(1000 * 3600), now), "in 41 days (at 2027-02-26 00:00 UTC)");
        assert_eq!(when(LONGEST_WAIT, now), "in more than 10 years (an implausible time)");
        assert_eq!(
            when(LONGEST_WAIT - S(60), now),
            "in more than 10 years (an implausible time)"
        );
    }

    #[test]
    fn a_window_past_the_cap_is_a_clear_rate_limit_error() {
        let e = window_over_cap("scn", S(1000 * 3600), 120_000);
        assert_eq!(e.class, ErrorClass::RateLimit);
        assert!(!e.retryable);
        assert!(
            e.message
                .starts_with("scn: the rate-limit window is used up and resets in 41 days (at "),
            "{}",
            e.message
        );
        assert!(e.message.contains("retry.max_wait_ms allows waiting only 2 min (120000 ms), so the request was not sent. Wait until then, raise retry.max_wait_ms in setup(), or switch to another model."), "{}", e.message);
    }

    proptest! {
        #[test]
        fn no_header_text_panics_or_exceeds_the_bound(text in any::<String>()) {
            for d in [parse_go_duration(&text), parse_seconds(&text), until_rfc3339(&text, SystemTime::now()), until_http_date(&text, SystemTime::now())].into_iter().flatten() {
                prop_assert!(d <= LONGEST_WAIT);
                let _ = when(d, SystemTime::now());
            }
        }

        #[test]
        fn duration_like_text_never_panics_or_exceeds_the_bound(text in "[-+0-9.eEnaNifµsmh ]{0,40}") {
            for d in [parse_go_duration(&text), parse_seconds(&text)].into_iter().flatten() {
                prop_assert!(d <= LONGEST_WAIT);
            }
        }

        #[test]
        fn no_header_bytes_panic_a_window(value in proptest::collection::vec(any::<u8>(), 0..48)) {
            let mut h = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_bytes(&value) {
                h.insert("x-ratelimit-remaining-tokens", HeaderValue::from_static("0"));
                h.insert("x-ratelimit-reset-tokens", v.clone());
                h.insert("anthropic-ratelimit-requests-remaining", HeaderValue::from_static("0"));
                h.insert("anthropic-ratelimit-requests-reset", v);
            }
            let limits = RateLimits::default();
            limits.observe("p", &h, OWN);
            if let Some(Hold::Exhausted(w) | Hold::Paced(w)) = limits.wait_for("p", true) {
                prop_assert!(w <= LONGEST_WAIT);
            }
        }
    }
}
