//! Stripe-style form bodies: `metadata[order]=4812&expand[0]=charge`, with literal brackets,
//! decoded into nested JSON (objects for names, arrays for indexes and `[]`).

use std::borrow::Cow;

use serde_json::{Map, Value};

/// The name and value pairs of a form body, decoded: what `form_urlencoded::parse` yields,
/// pair for pair. A pair with no `+`, no `%` and nothing but UTF-8 (nearly all) is borrowed as
/// it is, without the three passes over it that decoding makes; any other is decoded by
/// `form_urlencoded` itself.
pub fn pairs(body: &[u8]) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    body.split(|&b| b == b'&').filter(|pair| !pair.is_empty()).filter_map(|pair| {
        let plain = !pair.iter().any(|&b| b == b'+' || b == b'%');
        match std::str::from_utf8(pair) {
            Ok(text) if plain => {
                let (name, value) = text.split_once('=').unwrap_or((text, ""));
                Some((Cow::Borrowed(name), Cow::Borrowed(value)))
            }
            // A non-empty run without `&` is exactly one pair.
            _ => form_urlencoded::parse(pair).next(),
        }
    })
}

/// A form body decoded into a JSON object.
pub fn decode(body: &[u8]) -> Result<Map<String, Value>, String> {
    let mut root = Map::new();
    for (name, value) in pairs(body) {
        let value = Value::String(value.into_owned());
        if !name.contains('[') {
            // A plain name (most are): no path to split.
            if name.is_empty() {
                return Err(format!("Invalid parameter name: '{name}'"));
            }
            if root.contains_key(name.as_ref()) {
                return Err(format!("Received a repeated parameter: '{name}'"));
            }
            root.insert(name.into_owned(), value);
            continue;
        }
        let path = split_name(&name)?;
        insert(&mut root, &name, &path, value)?;
    }
    Ok(root)
}

/// `a[b][0]` as `["a", "b", "0"]`.
fn split_name(name: &str) -> Result<Vec<&str>, String> {
    let (head, mut rest) = match name.find('[') {
        Some(i) => (&name[..i], &name[i..]),
        None => (name, ""),
    };
    if head.is_empty() {
        return Err(format!("Invalid parameter name: '{name}'"));
    }
    let mut path = vec![head];
    while !rest.is_empty() {
        let Some(close) = rest.find(']') else {
            return Err(format!("Invalid parameter name: '{name}' (unclosed bracket)"));
        };
        if !rest.starts_with('[') {
            return Err(format!("Invalid parameter name: '{name}'"));
        }
        path.push(&rest[1..close]);
        rest = &rest[close + 1..];
    }
    Ok(path)
}

fn insert(map: &mut Map<String, Value>, name: &str, path: &[&str], value: Value) -> Result<(), String> {
    let (first, rest) = path.split_first().ok_or_else(|| format!("Invalid parameter name: '{name}'"))?;
    if rest.is_empty() {
        if map.contains_key(*first) {
            return Err(format!("Received a repeated parameter: '{name}'"));
        }
        map.insert((*first).to_string(), value);
        return Ok(());
    }
    let array = rest[0].is_empty() || rest[0].bytes().all(|b| b.is_ascii_digit());
    let slot = map
        .entry((*first).to_string())
        .or_insert_with(|| if array { Value::Array(vec![]) } else { Value::Object(Map::new()) });
    insert_value(slot, name, rest, value)
}

fn insert_value(slot: &mut Value, name: &str, path: &[&str], value: Value) -> Result<(), String> {
    match slot {
        Value::Object(map) => insert(map, name, path, value),
        Value::Array(items) => {
            let (index, rest) =
                path.split_first().ok_or_else(|| format!("Invalid parameter name: '{name}'"))?;
            if !rest.is_empty() {
                return Err(format!("Invalid array parameter: '{name}' (nested arrays are not accepted)"));
            }
            if !index.is_empty() {
                let i: usize = index.parse().map_err(|_| format!("Invalid array index in '{name}'"))?;
                if i != items.len() {
                    return Err(format!("Invalid array index in '{name}': indexes must count up from 0"));
                }
            }
            items.push(value);
            Ok(())
        }
        _ => Err(format!("Invalid parameter: '{name}' mixes a value with nested fields")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nested_names_decode_to_json() {
        let cases: &[(&str, Value)] = &[
            ("amount=100", json!({"amount": "100"})),
            (
                "payment_intent=pi_1&metadata[intent]=i%201&metadata[run]=7",
                json!({"payment_intent": "pi_1", "metadata": {"intent": "i 1", "run": "7"}}),
            ),
            ("expand[0]=charge&expand[1]=x", json!({"expand": ["charge", "x"]})),
            ("expand[]=charge&expand[]=x", json!({"expand": ["charge", "x"]})),
            ("a[b][c]=1", json!({"a": {"b": {"c": "1"}}})),
            ("", json!({})),
        ];
        for (body, want) in cases {
            assert_eq!(Value::Object(decode(body.as_bytes()).unwrap()), *want, "{body}");
        }
    }

    /// The pairs are `form_urlencoded`'s, whatever the body holds.
    #[test]
    fn pairs_are_form_urlencodeds() {
        let bodies: &[&[u8]] = &[
            b"payment_intent=pi_bench&amount=1",
            b"",
            b"&",
            b"&&a=1&&",
            b"a",
            b"a=",
            b"=b",
            b"=",
            b"a==b=c",
            b"a+b=c+d",
            b"a%20b=%41%zz%",
            b"x=%FF",
            b"x=\xff\xfe&y=1",
            b"caf\xc3\xa9=th\xc3\xa9",
            b"metadata[a]=1&expand[]=x",
            b"a=1;b=2",
        ];
        for body in bodies {
            let ours: Vec<_> = pairs(body).collect();
            let theirs: Vec<_> = form_urlencoded::parse(body).collect();
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn malformed_names_are_errors() {
        for body in ["[x]=1", "a[b=1", "a=1&a[b]=2", "a[b]=1&a=2", "e[1]=x", "a=1&a=2", "e[0][x]=1"] {
            assert!(decode(body.as_bytes()).is_err(), "{body}");
        }
    }
}
