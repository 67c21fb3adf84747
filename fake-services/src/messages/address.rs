//! What an email address is to the messages fake: `email@example.com` or
//! `Name <email@example.com>`, read down to the address an inbox is keyed by. Both the send,
//! which refuses what is not one, and the mailbox, which files deliveries by it, read
//! addresses this one way.

/// The longest address the fake takes.
const ADDRESS_CHARS_MAX: usize = 254;

/// The address in `email@example.com` or `Name <email@example.com>`, lowercased (inboxes do
/// not tell case apart): a local part and a dotted domain, no white space, no brackets.
pub(crate) fn address_of(text: &str) -> Option<String> {
    let text = text.trim();
    let bare = match text.rfind('<') {
        Some(open) if text.ends_with('>') => &text[open + 1..text.len() - 1],
        Some(_) => return None,
        None => text,
    };
    let (local, domain) = bare.split_once('@')?;
    let plain =
        |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_graphic() && !"<>@()[],;:\\\"".contains(c));
    let ok = bare.len() <= ADDRESS_CHARS_MAX
        && plain(local)
        && plain(domain)
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.');
    ok.then(|| bare.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_plain_or_with_a_name() {
        let cases = [
            ("ada@example.com", Some("ada@example.com")),
            ("Ada Lovelace <Ada@Example.com>", Some("ada@example.com")),
            ("  <ops+alerts@mail.example.co.uk>  ", Some("ops+alerts@mail.example.co.uk")),
            ("ada", None),
            ("ada@example", None),
            ("Ada <ada@example.com", None),
            ("ada@@example.com", None),
            ("a da@example.com", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(address_of(text).as_deref(), want, "{text:?}");
        }
    }
}
