//! Rate-limit windows announced in response headers. When a provider says a
//! window is exhausted (`x-ratelimit-remaining-*: 0`,
//! `anthropic-ratelimit-*-remaining: 0`), the next request to that provider
//! waits for the reset instead of earning a 429.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::HeaderMap;

/// Per-provider "do not send before" instants.
#[derive(Debug, Default)]
pub struct RateLimits {
    blocked_until: Mutex<HashMap<String, Instant>>,
}

impl RateLimits {
    /// Records what `headers` say about `provider`'s window.
    pub fn observe(&self, provider: &str, headers: &HeaderMap) {
        if let Some(wait) = exhausted_window(headers, SystemTime::now()) {
            let until = Instant::now() + wait;
            let mut map = self.blocked_until.lock().unwrap_or_else(|p| p.into_inner());
            let slot = map.entry(provider.to_string()).or_insert(until);
            if *slot < until {
                *slot = until;
            }
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
        Some(until - now)
    }
}

/// The longest wait any exhausted window in `headers` asks for.
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

/// Parses durations like `"1s"`, `"6m0s"`, `"20ms"`, `"1h2m3.5s"`.
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
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

fn until_rfc3339(text: &str, now: SystemTime) -> Option<Duration> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    let at = SystemTime::from(at);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_go_duration("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(parse_go_duration("1h2m3.5s"), Some(Duration::from_millis(3_723_500)));
        assert_eq!(parse_go_duration("soon"), None);
    }

    #[test]
    fn an_exhausted_openai_window_asks_for_its_reset() {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("0"));
        h.insert("x-ratelimit-reset-requests", HeaderValue::from_static("2s"));
        h.insert("x-ratelimit-remaining-tokens", HeaderValue::from_static("5000"));
        h.insert("x-ratelimit-reset-tokens", HeaderValue::from_static("9s"));
        assert_eq!(exhausted_window(&h, SystemTime::now()), Some(Duration::from_secs(2)));
    }

    #[test]
    fn an_exhausted_anthropic_window_waits_until_the_reset_time() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut h = HeaderMap::new();
        h.insert("anthropic-ratelimit-requests-remaining", HeaderValue::from_static("0"));
        // 1_800_000_000 is 2027-01-15T08:00:00Z
        h.insert(
            "anthropic-ratelimit-requests-reset",
            HeaderValue::from_static("2027-01-15T08:00:03Z"),
        );
        assert_eq!(exhausted_window(&h, now), Some(Duration::from_secs(3)));
    }

    #[test]
    fn windows_with_room_ask_for_nothing() {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("10"));
        h.insert("x-ratelimit-reset-requests", HeaderValue::from_static("2s"));
        assert_eq!(exhausted_window(&h, SystemTime::now()), None);
        let limits = RateLimits::default();
        limits.observe("p", &h);
        assert_eq!(limits.wait_for("p"), None);
    }
}
