//! What a model id says about itself: whether it carries a release date (so
//! it has an undated alias), and which product line and version it belongs
//! to (so a cheaper sibling can be found). Vendors spell these differently:
//! Anthropic `claude-sonnet-4-5-20250929`, OpenAI `gpt-4o-2024-08-06` and
//! `gpt-4-0613`, Mistral `mistral-large-2512` next to `mistral-large-latest`.

/// The id without its trailing release date or `-latest` marker, when it has
/// one: `claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`,
/// `gpt-4o-2024-08-06` → `gpt-4o`, `mistral-large-latest` → `mistral-large`.
/// `None` for an id that is already undated.
pub(crate) fn undated(model: &str) -> Option<&str> {
    if let Some(base) = model.strip_suffix("-latest") {
        return non_empty(base);
    }
    if let Some(base) = strip_iso_date(model) {
        return non_empty(base);
    }
    let (base, last) = model.rsplit_once('-')?;
    let dated = match last.len() {
        8 => is_yyyymmdd(last),
        4 => is_short_date(last),
        _ => false,
    };
    if dated {
        non_empty(base)
    } else {
        None
    }
}

/// True when `model` ends in a release date (not merely `-latest`).
pub(crate) fn has_date(model: &str) -> bool {
    !model.ends_with("-latest") && undated(model).is_some()
}

/// The product line and version numbers of an id, ignoring dates and size or
/// tier words: `claude-sonnet-4-5` and `claude-haiku-4-5` are both
/// `("claude", ["4", "5"])`, `gpt-4.1` and `gpt-4.1-mini` are both
/// `("gpt", ["4.1"])`, `deepseek-v4-pro` is `("deepseek", ["4"])`. Two ids
/// with the same family are the same generation of the same vendor line.
pub(crate) fn family(model: &str) -> (&str, Vec<&str>) {
    let mut id = model;
    while let Some(base) = undated(id) {
        id = base;
    }
    let mut tokens = id.split('-');
    let line = tokens.next().unwrap_or_default();
    let version = tokens.filter_map(version_number).collect();
    (line, version)
}

/// `"4"`, `"4.1"`, `"v4"` → the number; anything else (words, sizes like
/// `70b`, four-digit dates in the middle of an id) → `None`.
fn version_number(token: &str) -> Option<&str> {
    let number = token.strip_prefix('v').unwrap_or(token);
    let starts_with_digit = number.starts_with(|c: char| c.is_ascii_digit());
    let numeric = number.chars().all(|c| c.is_ascii_digit() || c == '.');
    let date_like = number.len() >= 4 && number.chars().all(|c| c.is_ascii_digit());
    (starts_with_digit && numeric && !date_like).then_some(number)
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// `base-YYYY-MM-DD` → `base`.
fn strip_iso_date(model: &str) -> Option<&str> {
    let split = model.len().checked_sub(11)?;
    let (base, tail) = (model.get(..split)?, model.get(split..)?);
    let date = tail.strip_prefix('-')?;
    let mut parts = date.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = [y, m, d].iter().all(|p| p.chars().all(|c| c.is_ascii_digit()));
    (digits && y.len() == 4 && m.len() == 2 && d.len() == 2 && plausible(num(m), num(d))).then_some(base)
}

fn is_yyyymmdd(s: &str) -> bool {
    s.chars().all(|c| c.is_ascii_digit()) && s.starts_with("20") && plausible(num(&s[4..6]), num(&s[6..8]))
}

/// Four digits that read as a year-month (`2512`, Mistral) or a month-day
/// (`0613`, older OpenAI and xAI ids).
fn is_short_date(s: &str) -> bool {
    if !s.chars().all(|c| c.is_ascii_digit()) {
        return false;
    }
    let (a, b) = (num(&s[..2]), num(&s[2..]));
    let year_month = (20..=39).contains(&a) && (1..=12).contains(&b);
    let month_day = (1..=12).contains(&a) && (1..=31).contains(&b);
    year_month || month_day
}

fn plausible(month: u32, day: u32) -> bool {
    (1..=12).contains(&month) && (1..=31).contains(&day)
}

fn num(s: &str) -> u32 {
    s.parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_dates_are_recognized() {
        assert_eq!(undated("claude-sonnet-4-5-20250929"), Some("claude-sonnet-4-5"));
        assert_eq!(undated("gpt-4o-2024-08-06"), Some("gpt-4o"));
        assert_eq!(undated("gpt-4-0613"), Some("gpt-4"));
        assert_eq!(undated("mistral-large-2512"), Some("mistral-large"));
        assert_eq!(undated("mistral-large-latest"), Some("mistral-large"));
        assert!(has_date("mistral-large-2512"));
        assert!(!has_date("mistral-large-latest"));
    }

    #[test]
    fn version_numbers_are_not_dates() {
        assert_eq!(undated("claude-sonnet-4-5"), None);
        assert_eq!(undated("gpt-4.1"), None);
        assert_eq!(undated("llama-3.3-70b-versatile"), None);
        assert_eq!(undated("gpt-5.4-pro"), None);
        assert_eq!(undated("-latest"), None);
        assert_eq!(undated("model-9999"), None);
    }

    #[test]
    fn siblings_share_a_family() {
        assert_eq!(family("claude-sonnet-4-5"), family("claude-haiku-4-5-20251001"));
        assert_eq!(family("gpt-4.1"), family("gpt-4.1-mini"));
        assert_eq!(family("deepseek-v4-pro"), family("deepseek-v4-flash"));
        assert_ne!(family("claude-sonnet-4-5"), family("claude-3-5-haiku-20241022"));
        assert_ne!(family("gpt-4.1"), family("gpt-5-mini"));
        assert_eq!(family("grok-4.20-0309-reasoning"), ("grok", vec!["4.20"]));
    }
}
