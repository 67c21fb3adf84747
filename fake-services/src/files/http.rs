//! The HTTP details S3 honours: paths, bucket names, entity tags, dates and byte ranges.

use std::time::{Duration, UNIX_EPOCH};

/// Longest key S3 stores, in UTF-8 bytes.
pub const KEY_BYTES_MAX: usize = 1024;

/// Percent-decodes a path segment (no `+` for space: that is form encoding, not paths).
/// `None` for a broken escape or bytes that are not UTF-8.
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).filter(|h| h.iter().all(u8::is_ascii_hexdigit))?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// S3's rules for a bucket name (general purpose buckets): 3 to 63 characters of lowercase
/// letters, digits, dots and hyphens, starting and ending with a letter or digit, no two
/// adjacent dots, not an IP address, none of the reserved prefixes and suffixes.
pub fn check_bucket_name(name: &str) -> Result<(), String> {
    let fail = |why: &str| Err(format!("bucket name \"{name}\" {why}"));
    if !(3..=63).contains(&name.len()) {
        return fail("must be 3 to 63 characters long");
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-') {
        return fail("may hold only lowercase letters, digits, dots and hyphens");
    }
    let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !edge(name.bytes().next()) || !edge(name.bytes().last()) {
        return fail("must start and end with a letter or a digit");
    }
    if name.contains("..") {
        return fail("must not hold two adjacent dots");
    }
    if name.parse::<std::net::Ipv4Addr>().is_ok() {
        return fail("must not be an IP address");
    }
    for prefix in ["xn--", "sthree-", "amzn-s3-demo-"] {
        if name.starts_with(prefix) {
            return fail(&format!("must not start with \"{prefix}\""));
        }
    }
    for suffix in ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"] {
        if name.ends_with(suffix) {
            return fail(&format!("must not end with \"{suffix}\""));
        }
    }
    Ok(())
}

/// The entity tags of an `If-Match` or `If-None-Match` value, without quotes or `W/`; `*` as
/// itself.
pub(crate) fn etags(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| t.strip_prefix("W/").unwrap_or(t).trim_matches('"').to_string())
        .collect()
}

/// Whether an object with `etag` (quoted) satisfies a list of tags.
pub(crate) fn etag_matches(tags: &[String], etag: &str) -> bool {
    let bare = etag.trim_matches('"');
    tags.iter().any(|t| t == "*" || t == bare)
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `Last-Modified` style (IMF-fixdate): `Sun, 06 Nov 1994 08:49:37 GMT`, whole seconds.
/// A time past year 9999 (which `httpdate` refuses with a panic) is written as its last second.
pub(crate) fn http_date(ms: u64) -> String {
    let ms = ms.min(crate::clock::SERVICE_TIME_MS_MAX);
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(ms / 1000))
}

/// ISO 8601 with milliseconds, as S3's XML writes times: `2009-10-12T17:50:30.000Z`.
pub(crate) fn iso_date(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

/// Reads an HTTP date to milliseconds: an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) or
/// either obsolete form RFC 9110 asks a recipient to accept too (RFC 850's
/// `Sunday, 06-Nov-94 08:49:37 GMT`, asctime's `Sun Nov  6 08:49:37 1994`); `None` for
/// anything else, which HTTP says to ignore.
pub(crate) fn parse_http_date(text: &str) -> Option<u64> {
    let at = httpdate::parse_http_date(text.trim()).ok()?;
    u64::try_from(at.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()
}

/// A `Range` header against an object of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Range {
    /// No usable range: serve the whole object (absent, or a form S3 ignores).
    Whole,
    /// Bytes `start..=end`.
    Part { start: u64, end: u64 },
    /// A well-formed range outside the object: 416.
    Unsatisfiable,
}

/// Reads `bytes=a-b`, `bytes=a-` and `bytes=-n`. Several ranges, or anything malformed, are
/// ignored, as S3 does.
pub(crate) fn parse_range(value: Option<&str>, size: u64) -> Range {
    let Some(spec) = value.and_then(|v| v.trim().strip_prefix("bytes=")) else { return Range::Whole };
    if spec.contains(',') {
        return Range::Whole;
    }
    let Some((first, last)) = spec.trim().split_once('-') else { return Range::Whole };
    let number = |t: &str| t.trim().parse::<u64>().ok();
    match (first.trim().is_empty(), last.trim().is_empty()) {
        (true, true) => Range::Whole,
        (true, false) => match number(last) {
            Some(0) => Range::Unsatisfiable,
            Some(n) if size > 0 => Range::Part { start: size.saturating_sub(n), end: size - 1 },
            Some(_) => Range::Unsatisfiable,
            None => Range::Whole,
        },
        (false, open_end) => {
            let Some(start) = number(first) else { return Range::Whole };
            let end = if open_end {
                u64::MAX
            } else {
                match number(last) {
                    Some(end) if end >= start => end,
                    _ => return Range::Whole,
                }
            };
            if start >= size { Range::Unsatisfiable } else { Range::Part { start, end: end.min(size - 1) } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        assert_eq!(http_date(784_111_777_000), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777_000));
        assert_eq!(iso_date(1_255_369_830_123), "2009-10-12T17:50:30.123Z");
        assert_eq!(http_date(1_767_225_600_000), "Thu, 01 Jan 2026 00:00:00 GMT");
        for ms in [0, 951_782_400_000, 4_102_444_799_000] {
            assert_eq!(parse_http_date(&http_date(ms)), Some(ms));
        }
        // RFC 9110 §5.6.7: the two obsolete forms are read too.
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777_000));
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), Some(784_111_777_000));
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 25:49:37 GMT"), None);
        assert_eq!(parse_http_date("yesterday"), None);
    }

    #[test]
    fn ranges_follow_s3() {
        let r = |v| parse_range(Some(v), 10);
        assert_eq!(r("bytes=0-4"), Range::Part { start: 0, end: 4 });
        assert_eq!(r("bytes=5-"), Range::Part { start: 5, end: 9 });
        assert_eq!(r("bytes=-3"), Range::Part { start: 7, end: 9 });
        assert_eq!(r("bytes=-30"), Range::Part { start: 0, end: 9 });
        assert_eq!(r("bytes=2-100"), Range::Part { start: 2, end: 9 });
        assert_eq!(r("bytes=10-"), Range::Unsatisfiable);
        assert_eq!(r("bytes=0-1,3-4"), Range::Whole);
        assert_eq!(r("bytes=4-2"), Range::Whole);
        assert_eq!(r("items=0-1"), Range::Whole);
        assert_eq!(parse_range(Some("bytes=0-"), 0), Range::Unsatisfiable);
        assert_eq!(parse_range(None, 0), Range::Whole);
    }

    #[test]
    fn names_tags_and_paths() {
        assert!(check_bucket_name("reports").is_ok());
        assert!(check_bucket_name("my.bucket-1").is_ok());
        for bad in ["ab", "Reports", "a..b", "-ab", "ab-", "192.168.1.1", "xn--ab", "ab-s3alias", "a_b"] {
            assert!(check_bucket_name(bad).is_err(), "{bad}");
        }
        assert_eq!(etags("\"abc\", W/\"def\""), vec!["abc", "def"]);
        assert!(etag_matches(&etags("*"), "\"x\""));
        assert!(!etag_matches(&etags("\"y\""), "\"x\""));
        assert_eq!(percent_decode("a%20b/%C3%BC%2Bc").as_deref(), Some("a b/ü+c"));
        assert_eq!(percent_decode("a+b").as_deref(), Some("a+b"));
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
        assert_eq!(percent_decode("%2"), None);
        assert_eq!(percent_decode("%+1"), None);
    }
}
