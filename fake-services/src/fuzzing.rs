//! The bodies of the coverage-guided fuzz targets in `fuzz/` (`cargo fuzz`), one function a
//! parser. Each takes any bytes, may see the parser refuse them, and panics only when a
//! parser breaks: a panic inside it, or a property below that does not hold.
//!
//! They live here, compiled with the crate, and not in `fuzz/` so that the normal suite
//! (`tests/it/fuzz_corpus.rs`) replays every corpus file through the very code libFuzzer
//! runs, without libFuzzer or a nightly flag; and so that the parsers stay private to the
//! crate (this module reaches them from inside). Not an API: hidden from the docs.

use alloy_eips::eip2718::Encodable2718 as _;
use serde_json::Value;

use crate::chain::node::decode_raw;
use crate::chain::rpc::{BATCH_CALLS_MAX, Envelope};
use crate::clock::SERVICE_TIME_MS_MAX;
use crate::files::http::{Range, http_date, parse_http_date, parse_range};
use crate::files::xml::{DELETE_KEYS_MAX, parse_complete, parse_delete};

/// A Stripe-style form body ([`crate::form::decode`]). Property: a body that decodes has
/// exactly one string leaf per `name=value` pair (no pair is lost or counted twice).
pub fn forms(data: &[u8]) {
    let Ok(decoded) = crate::form::decode(data) else { return };
    let pairs = form_urlencoded::parse(data).count();
    let leaves: usize = decoded.values().map(leaf_count).sum();
    assert_eq!(leaves, pairs, "a decoded form lost or duplicated a value");
}

fn leaf_count(value: &Value) -> usize {
    match value {
        Value::Object(map) => map.values().map(leaf_count).sum(),
        Value::Array(items) => items.iter().map(leaf_count).sum(),
        _ => 1,
    }
}

/// The S3 request bodies and headers the files fake reads: a `DeleteObjects` body, a
/// `CompleteMultipartUpload` body, and (the bytes as text) a `Range` and an HTTP date.
/// Properties: a delete names at most [`DELETE_KEYS_MAX`] keys, none empty; a range served
/// lies inside the object; a date read writes back to the same instant.
pub fn s3_xml(data: &[u8]) {
    if let Ok(request) = parse_delete(data) {
        assert!(
            request.keys.len() <= DELETE_KEYS_MAX,
            "a delete of {} keys was accepted",
            request.keys.len()
        );
    }
    let _ = parse_complete(data);
    let Ok(text) = std::str::from_utf8(data) else { return };
    for size in [0, 1, 10, 4096, u64::MAX] {
        match parse_range(Some(text), size) {
            Range::Part { start, end } => {
                assert!(start <= end && end < size, "range {start}-{end} outside an object of {size} bytes")
            }
            Range::Whole | Range::Unsatisfiable => {}
        }
    }
    if let Some(ms) = parse_http_date(text) {
        assert_eq!(ms % 1000, 0, "an HTTP date has whole seconds");
        if ms <= SERVICE_TIME_MS_MAX {
            assert_eq!(parse_http_date(&http_date(ms)), Some(ms), "{text:?} does not round-trip");
        }
    }
}

/// Raw transaction bytes, as `eth_sendRawTransaction` takes them ([`decode_raw`]). Property:
/// decoding is canonical, so a transaction that decodes encodes back to the very same bytes,
/// and its hash is theirs.
pub fn tx_decode(data: &[u8]) {
    let Ok(decoded) = decode_raw(data) else { return };
    let encoded = decoded.envelope.encoded_2718();
    assert_eq!(encoded, data, "a decoded transaction encodes to other bytes");
    assert_eq!(decoded.hash, alloy_primitives::keccak256(data), "a transaction's hash is not its bytes'");
    let _ = decoded.transfer_params();
}

/// A JSON-RPC request body ([`Envelope::parse`]). Properties: a batch holds 1 to
/// [`BATCH_CALLS_MAX`] calls; and the reading depends on the JSON value alone, so the same
/// value written back by serde reads the same.
pub fn json_rpc(data: &[u8]) {
    let envelope = Envelope::parse(data);
    if let Envelope::Batch(calls) = &envelope {
        assert!((1..=BATCH_CALLS_MAX).contains(&calls.len()), "a batch of {} calls", calls.len());
    }
    let _ = envelope.first_method();
    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        let rewritten = serde_json::to_vec(&value).unwrap_or_default();
        assert_eq!(Envelope::parse(&rewritten), envelope, "the same JSON value reads differently");
    }
}
