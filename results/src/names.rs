//! File names made from names twice did not choose: a scenario's (validated, but a results
//! file or a shrunk case may carry any), an executor's. [`file_name_part`] turns any name into
//! one component of a path that stays inside its directory on every common file system.
//!
//! The rule: ASCII letters, digits, `-` and `_` are kept, and `.` except at the start and the
//! end; every other character (`/`, `\`, NUL, control characters, `<>:"|?*`, spaces, any
//! non-ASCII) becomes `_`; the result is at most [`NAME_PART_BYTES_MAX`] bytes. When that
//! changed the name, or the name is one Windows reserves (`CON`, `NUL`, `COM1`, ..., which
//! then get a leading `_`), a hyphen and 16 hex digits of a hash of the original name are appended, so that two names
//! that differ still give two file names.

use std::fmt::Write;

/// The longest part [`file_name_part`] returns, hash included. A caller's prefix and
/// extension come on top (a failure file's `NNNN-` and `.toml`), well under the 255 bytes
/// file systems allow.
pub const NAME_PART_BYTES_MAX: usize = 120;

/// Bytes of a hash suffix: `-` and 16 hex digits.
const HASH_SUFFIX_BYTES: usize = 17;

/// Names Windows gives to devices, whatever the case or extension.
const WINDOWS_RESERVED: &[&str] = &[
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9",
    "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

/// `name` as one safe component of a file name (see the module documentation); never empty.
pub fn file_name_part(name: &str) -> String {
    let mut safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .collect();
    // A leading dot hides the file (and `..` climbs); a trailing one Windows drops.
    if safe.starts_with('.') {
        safe.replace_range(..1, "_");
    }
    if safe.ends_with('.') {
        let end = safe.len() - 1;
        safe.replace_range(end.., "_");
    }
    if safe.is_empty() {
        safe.push('_');
    }
    let stem = safe.split('.').next().unwrap_or("");
    let reserved = WINDOWS_RESERVED.iter().any(|r| r.eq_ignore_ascii_case(stem));
    if safe == name && !reserved && safe.len() <= NAME_PART_BYTES_MAX {
        return safe;
    }
    if reserved {
        // Windows reads `CON.txt` as the device too: the stem itself must change.
        safe.insert(0, '_');
    }
    // Every byte is ASCII now, so any length is a character boundary.
    safe.truncate(NAME_PART_BYTES_MAX - HASH_SUFFIX_BYTES);
    let _ = write!(safe, "-{:016x}", fnv1a(name.as_bytes()));
    safe
}

/// FNV-1a, 64 bits: stable across versions and platforms, so a name always gives the same file.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_stay_as_they_are() {
        for name in ["lost_refund_reply", "gen-0042", "a.b", "A1"] {
            assert_eq!(file_name_part(name), name);
        }
    }

    #[test]
    fn hostile_names_become_one_bounded_component_and_stay_distinct() {
        let long = "x".repeat(10_000);
        let names = [
            "../../etc/passwd",
            "..",
            ".",
            "",
            "a/b",
            "a\\b",
            "a_b",
            "nul\0byte",
            "bell\x07tab\t",
            ".hidden",
            "con",
            "CON.txt",
            "lpt9",
            "trailing.",
            "what?<>:\"|*",
            "ünïcode",
            long.as_str(),
            &long[..9_999],
        ];
        let mut seen = std::collections::BTreeSet::new();
        for name in names {
            let part = file_name_part(name);
            assert!(!part.is_empty() && part.len() <= NAME_PART_BYTES_MAX, "{name:?} -> {part}");
            assert!(
                part.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
                "{name:?} -> {part}"
            );
            assert!(!part.starts_with('.') && !part.ends_with('.'), "{name:?} -> {part}");
            let stem = part.split('.').next().unwrap_or("");
            assert!(!WINDOWS_RESERVED.iter().any(|r| r.eq_ignore_ascii_case(stem)), "{name:?} -> {part}");
            assert!(seen.insert(part.clone()), "{name:?} -> {part} is another name's too");
            assert_eq!(file_name_part(name), part, "the same name, the same file");
        }
    }
}
