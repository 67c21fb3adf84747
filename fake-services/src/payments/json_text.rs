//! JSON written by hand, byte for byte as `serde_json` writes it, for the answers every refund
//! create makes: `serde_json` escapes each name and string byte by byte through its
//! serializer, which cost more than the rest of the answer, and nearly every string here
//! (ids, currencies, parameter names) needs no escape at all.

/// Whether `s` is written in JSON as it is, between quotes. What serde_json escapes: `"`,
/// `\` and the control characters below U+0020; nothing else (not U+007F, not any non-ASCII
/// character).
pub(super) fn plain(s: &str) -> bool {
    // Eight bytes at a time: whether any byte of a word is below 0x20, or is `"` or `\` (a
    // byte that is zero once the word is XORed with it), by the exact bit tests for "some byte
    // is less than n" (n at most 0x80).
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let below = |word: u64, n: u64| word.wrapping_sub(ONES * n) & !word & HIGHS != 0;
    let mut words = s.as_bytes().chunks_exact(8);
    for chunk in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        let word = u64::from_le_bytes(bytes);
        if below(word, 0x20)
            || below(word ^ (ONES * u64::from(b'"')), 1)
            || below(word ^ (ONES * u64::from(b'\\')), 1)
        {
            return false;
        }
    }
    words.remainder().iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// Appends `s` as a JSON string, with `serde_json`'s escapes.
pub(super) fn push_str(out: &mut String, s: &str) {
    if plain(s) {
        push_plain(out, s);
    } else {
        // A string is always written: serde_json fails only on a map whose keys are not strings.
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
}

/// Appends `s`, which is [`plain`], between quotes.
pub(super) fn push_plain(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    out.push_str(s);
    out.push('"');
}

/// Appends `n` in decimal, as JSON writes an integer.
pub(super) fn push_u64(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // A decimal digit: below 10, so the cast keeps it whole.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &digit in &digits[at..] {
        out.push(char::from(digit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_integers_are_written_as_serde_json_writes_them() {
        let strings = [
            "",
            "re_3kT9",
            "a b",
            "q\"uote",
            "back\\slash",
            "line\nfeed",
            "\u{1}\u{1f}\u{7f}",
            "é✓",
            "ééééé✓✓✓ pi_é\u{7f}\u{7f}\u{7f}\u{7f}ÿ",
            "ééééé✓✓✓ pi_é\u{7f}\u{7f}\"\u{7f}ÿ",
            "ééééé✓✓✓ pi_é\u{7f}\u{7f}\u{1f}\u{7f}ÿ",
            "\t\r\u{8}\u{c}",
        ];
        for s in strings {
            let mut out = String::new();
            push_str(&mut out, s);
            assert_eq!(out, serde_json::to_string(s).unwrap(), "{s:?}");
        }
        // Every byte in every lane of a word, and in the tail.
        for b in 0..=0x7fu8 {
            for at in 0..11 {
                let mut text = vec![b'a'; 11];
                text[at] = b;
                let text = String::from_utf8(text).unwrap();
                assert_eq!(plain(&text), serde_json::to_string(&text).unwrap() == format!("\"{text}\""));
            }
        }
        for n in [0, 1, 9, 10, 99, 1_700_000_123, u64::MAX] {
            let mut out = String::new();
            push_u64(&mut out, n);
            assert_eq!(out, serde_json::to_string(&n).unwrap());
        }
    }
}
