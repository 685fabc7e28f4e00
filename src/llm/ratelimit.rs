//! Rate-limit windows announced in response headers, and every other wait a
//! server can ask for. When a provider says a window is exhausted
//! (`x-ratelimit-remaining-*: 0`, `anthropic-ratelimit-*-remaining: 0`), the
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

/// Per-provider "do not send before" instants, keyed by provider name: one
/// provider's window never holds up another.
#[derive(Debug, Default)]
pub struct RateLimits {
    blocked_until: Mutex<HashMap<String, Instant>>,
}

impl RateLimits {
    /// Records what `headers` say about `provider`'s window.
    pub fn observe(&self, provider: &str, headers: &HeaderMap) {
        if let Some(wait) = exhausted_window(headers, SystemTime::now()) {
            self.block(provider, wait);
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

    /// How long a request to `provider` must still wait, if at all.
    pub fn wait_for(&self, provider: &str) -> Option<Duration> {
        let mut map = self.blocked_until.lock().unwrap_or_else(|p| p.into_inner());
        let until = *map.get(provider)?;
        let now = Instant::now();
        if until <= now {
            map.remove(provider);
            return None;
        }
        Some(until.saturating_duration_since(now))
    }
}

/// The longest wait any exhausted window in `headers` asks for (at most
/// [`LONGEST_WAIT`]); windows whose reset cannot be read are ignored.
pub fn exhausted_window(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    let mut longest: Option<Duration> = None;
    let mut consider = |d: Option<Duration>| {
        if let Some(d) = d {
            longest = Some(longest.map_or(d, |l| l.max(d)));
        }
    };
    // OpenAI and most compatible servers: a remaining count and a reset duration ("1s", "6m0s").
    for kind in ["requests", "tokens"] {
        if get(&format!("x-ratelimit-remaining-{kind}")) == Some("0") {
            consider(get(&format!("x-ratelimit-reset-{kind}")).and_then(parse_go_duration));
        }
    }
    // Anthropic: a remaining count and an RFC 3339 reset time.
    for kind in ["requests", "tokens", "input-tokens", "output-tokens"] {
        if get(&format!("anthropic-ratelimit-{kind}-remaining")) == Some("0") {
            consider(get(&format!("anthropic-ratelimit-{kind}-reset")).and_then(|t| until_rfc3339(t, now)));
        }
    }
    longest
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
    fn an_exhausted_openai_window_asks_for_its_reset() {
        let h = window(&[
            ("x-ratelimit-remaining-requests", b"0"),
            ("x-ratelimit-reset-requests", b"2s"),
            ("x-ratelimit-remaining-tokens", b"5000"),
            ("x-ratelimit-reset-tokens", b"9s"),
        ]);
        assert_eq!(exhausted_window(&h, SystemTime::now()), Some(S(2)));
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
            assert_eq!(exhausted_window(&h, now), *want, "{:?}", String::from_utf8_lossy(value));
        }
        let h = window(&[
            ("anthropic-ratelimit-tokens-remaining", b"0"),
            ("anthropic-ratelimit-tokens-reset", b"\xff2027-01-15T08:00:03Z"),
        ]);
        assert_eq!(exhausted_window(&h, now), None);
    }

    #[test]
    fn an_exhausted_anthropic_window_waits_until_the_reset_time() {
        let now = SystemTime::UNIX_EPOCH + S(1_800_000_000);
        let h = window(&[
            ("anthropic-ratelimit-requests-remaining", b"0"),
            ("anthropic-ratelimit-requests-reset", b"2027-01-15T08:00:03Z"),
        ]);
        assert_eq!(exhausted_window(&h, now), Some(S(3)));
    }

    #[test]
    fn windows_with_room_ask_for_nothing() {
        let h = window(&[
            ("x-ratelimit-remaining-requests", b"10"),
            ("x-ratelimit-reset-requests", b"2s"),
        ]);
        assert_eq!(exhausted_window(&h, SystemTime::now()), None);
        let limits = RateLimits::default();
        limits.observe("p", &h);
        assert_eq!(limits.wait_for("p"), None);
    }

    #[test]
    fn one_providers_window_never_holds_up_another() {
        let limits = RateLimits::default();
        let h = window(&[
            ("x-ratelimit-remaining-requests", b"0"),
            ("x-ratelimit-reset-requests", b"99999999999999999999h"),
        ]);
        limits.observe("a", &h);
        assert!(limits.wait_for("a").is_some_and(|w| w > S(3600)));
        assert_eq!(limits.wait_for("b"), None);
        assert_eq!(limits.wait_for("a/"), None);
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
            limits.observe("p", &h);
            if let Some(w) = limits.wait_for("p") {
                prop_assert!(w <= LONGEST_WAIT);
            }
        }
    }
}
