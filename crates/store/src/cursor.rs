//! Opaque keyset-pagination cursors for session listings.
//!
//! A cursor is the `(updated_at_ms, id)` of the last session on a page,
//! hex-encoded with a version byte and a 32-bit checksum. The checksum also
//! covers the listing's cwd filter, so a cursor that was edited, truncated,
//! or carried over to a listing of another project is refused instead of
//! silently starting somewhere odd. It is not a secret: anyone may decode
//! it; it only has to catch accidents.

use super::error::StoreError;

const VERSION: u8 = 1;
/// Version byte + big-endian `i64` + checksum, before the id bytes count.
const FIXED_LEN: usize = 1 + 8 + 4;

/// The position after which the next page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub updated_at_ms: i64,
    pub id: String,
}

/// Encodes `cursor` for a listing filtered by `cwd` (or unfiltered).
pub(crate) fn encode(cursor: &Cursor, cwd: Option<&str>) -> String {
    let mut bytes = Vec::with_capacity(FIXED_LEN + cursor.id.len());
    bytes.push(VERSION);
    bytes.extend_from_slice(&cursor.updated_at_ms.to_be_bytes());
    bytes.extend_from_slice(cursor.id.as_bytes());
    let sum = checksum(&bytes, cwd);
    bytes.extend_from_slice(&sum.to_be_bytes());
    to_hex(&bytes)
}

/// Decodes a cursor that [`encode`] produced for the same `cwd` filter.
pub(crate) fn decode(text: &str, cwd: Option<&str>) -> Result<Cursor, StoreError> {
    let invalid = |reason: &str| StoreError::InvalidCursor {
        reason: reason.to_string(),
    };
    let bytes =
        from_hex(text).ok_or_else(|| invalid("it is not a cursor this store handed out (expected hex text)"))?;
    if bytes.len() < FIXED_LEN {
        return Err(invalid("it is too short to be a cursor (truncated?)"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 4);
    let mut sum_bytes = [0u8; 4];
    sum_bytes.copy_from_slice(sum);
    if checksum(body, cwd) != u32::from_be_bytes(sum_bytes) {
        return Err(invalid(
            "its checksum does not match: it was altered or truncated, or it belongs to a listing with a different cwd",
        ));
    }
    if body[0] != VERSION {
        return Err(invalid("it was made by a different version of mia"));
    }
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&body[1..9]);
    let id = String::from_utf8(body[9..].to_vec()).map_err(|_| invalid("its session id is not UTF-8"))?;
    Ok(Cursor {
        updated_at_ms: i64::from_be_bytes(ts),
        id,
    })
}

/// FNV-1a (64-bit, folded to 32) over the filter then the body. The filter
/// is tagged so that "no filter" and "cwd = ''" differ.
fn checksum(body: &[u8], cwd: Option<&str>) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let scope: &[u8] = match cwd {
        Some(_) => b"cwd\0",
        None => b"all\0",
    };
    let mut hash = OFFSET;
    for &b in scope
        .iter()
        .chain(cwd.unwrap_or("").as_bytes())
        .chain(&[0u8])
        .chain(body)
    {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(PRIME);
    }
    (hash ^ (hash >> 32)) as u32
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let raw = text.as_bytes();
    if raw.is_empty() || !raw.len().is_multiple_of(2) {
        return None;
    }
    raw.chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Cursor {
        Cursor {
            updated_at_ms: 1_717_000_000_123,
            id: "sess-éa-42".into(),
        }
    }

    #[test]
    fn cursor_round_trips_for_its_own_filter() {
        for cwd in [None, Some("/home/me/proj"), Some("")] {
            let text = encode(&sample(), cwd);
            assert_eq!(decode(&text, cwd).unwrap(), sample());
        }
    }

    #[test]
    fn cursor_from_another_filter_is_refused() {
        let text = encode(&sample(), Some("/a"));
        assert!(matches!(
            decode(&text, Some("/b")),
            Err(StoreError::InvalidCursor { .. })
        ));
        assert!(matches!(decode(&text, None), Err(StoreError::InvalidCursor { .. })));
        let empty = encode(&sample(), Some(""));
        assert!(decode(&empty, None).is_err());
    }

    #[test]
    fn every_single_digit_change_is_detected() {
        let text = encode(&sample(), None);
        for i in 0..text.len() {
            let mut bytes = text.clone().into_bytes();
            bytes[i] = if bytes[i] == b'0' { b'1' } else { b'0' };
            let altered = String::from_utf8(bytes).unwrap();
            assert!(decode(&altered, None).is_err(), "change at {i} accepted");
        }
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        for bad in ["", "zz", "abc", "00", &encode(&sample(), None)[..20]] {
            match decode(bad, None) {
                Err(StoreError::InvalidCursor { reason }) => assert!(!reason.is_empty()),
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn negative_and_extreme_timestamps_survive() {
        for ts in [i64::MIN, -1, 0, i64::MAX] {
            let c = Cursor {
                updated_at_ms: ts,
                id: String::new(),
            };
            assert_eq!(decode(&encode(&c, None), None).unwrap(), c);
        }
    }
}
