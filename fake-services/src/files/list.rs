//! ListObjects, V1 and V2: prefixes, delimiters (common prefixes), pages of at most 1,000
//! keys with markers and continuation tokens, and `encoding-type=url`.
//!
//! The largest read the fake answers, and the only one that walks many keys, so it has a
//! module of its own.

use std::sync::Arc;

use super::answer::{invalid_argument, no_such_bucket, xml_response};
use super::body;
use super::buckets::OWNER_ID;
use super::http::iso_date;
use super::store::{FilesState, Object};
use super::xml::{Document, S3Error};
use crate::core::Inner;
use crate::wire::{FakeRequest, FakeResponse};

/// `GET /{bucket}`: ListObjects (V1) or, with `list-type=2`, ListObjectsV2.
#[derive(Debug, Default)]
pub(super) struct ListQuery {
    v2: bool,
    prefix: String,
    delimiter: Option<String>,
    max_keys: usize,
    /// Start after this key (V1 `marker`, V2 `start-after` or `continuation-token`).
    after: Option<String>,
    marker: Option<String>,
    start_after: Option<String>,
    continuation_token: Option<String>,
    url_encoded: bool,
}

/// S3 lists at most this many keys per page.
const LIST_KEYS_MAX: usize = 1000;

impl ListQuery {
    pub(super) fn parse(req: &FakeRequest) -> Result<ListQuery, S3Error> {
        let mut query = ListQuery { max_keys: LIST_KEYS_MAX, ..ListQuery::default() };
        for (name, value) in req.query_pairs() {
            match name.as_str() {
                "list-type" => match value.as_str() {
                    "2" => query.v2 = true,
                    "1" => {}
                    _ => return Err(invalid_argument("list-type", &value, "Invalid List Type")),
                },
                "prefix" => query.prefix = value,
                "delimiter" => query.delimiter = Some(value).filter(|d| !d.is_empty()),
                "max-keys" => {
                    let n: i64 = value.parse().map_err(|_| {
                        invalid_argument(
                            "max-keys",
                            &value,
                            "Provided max-keys not an integer or within integer range",
                        )
                    })?;
                    if n < 0 {
                        return Err(invalid_argument(
                            "max-keys",
                            &value,
                            "Argument maxKeys must be an integer between 0 and 2147483647",
                        ));
                    }
                    query.max_keys = usize::try_from(n).unwrap_or(LIST_KEYS_MAX).min(LIST_KEYS_MAX);
                }
                "marker" => query.marker = Some(value),
                "start-after" => query.start_after = Some(value),
                "continuation-token" => query.continuation_token = Some(value),
                "encoding-type" => {
                    if value != "url" {
                        return Err(invalid_argument(
                            "encoding-type",
                            &value,
                            "Invalid Encoding Method specified in Request",
                        ));
                    }
                    query.url_encoded = true;
                }
                _ => {}
            }
        }
        query.after = if query.v2 {
            match &query.continuation_token {
                Some(token) => {
                    Some(body::unbase64(token).and_then(|t| String::from_utf8(t).ok()).ok_or_else(|| {
                        invalid_argument(
                            "continuation-token",
                            token,
                            "The continuation token provided is incorrect",
                        )
                    })?)
                }
                None => query.start_after.clone(),
            }
        } else {
            query.marker.clone()
        };
        Ok(query)
    }
}

pub(super) fn list_objects(
    inner: &mut Inner<FilesState>,
    bucket_name: &str,
    query: &ListQuery,
    until_ms: u64,
) -> FakeResponse {
    let Some(bucket) = inner.state.buckets.get(bucket_name) else {
        return no_such_bucket(bucket_name).response("GET");
    };
    let encode = |text: &str| if query.url_encoded { url_encode(text) } else { text.to_string() };
    let mut contents: Vec<(&str, &Arc<Object>)> = Vec::new();
    let mut prefixes: Vec<String> = Vec::new();
    let mut truncated = false;
    let mut last: Option<String> = None;
    let after = query.after.as_deref();
    let keys = bucket.keys.range::<str, _>((
        after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded),
        std::ops::Bound::Unbounded,
    ));
    for (key, _) in keys {
        if !key.starts_with(&query.prefix) {
            if key.as_str() > query.prefix.as_str() && !query.prefix.is_empty() {
                break;
            }
            continue;
        }
        // A page that ended on a common prefix goes on past every key under it.
        if let (Some(after), Some(d)) = (after, &query.delimiter)
            && after.ends_with(d.as_str())
            && key.starts_with(after)
        {
            continue;
        }
        let Some(object) = bucket.visible(key, until_ms) else { continue };
        let rolled = query.delimiter.as_deref().and_then(|d| {
            let rest = &key[query.prefix.len()..];
            rest.find(d).map(|i| key[..query.prefix.len() + i + d.len()].to_string())
        });
        if let Some(prefix) = &rolled
            && prefixes.last() == Some(prefix)
        {
            continue;
        }
        if contents.len() + prefixes.len() == query.max_keys {
            truncated = true;
            break;
        }
        match rolled {
            Some(prefix) => {
                last = Some(prefix.clone());
                prefixes.push(prefix);
            }
            None => {
                last = Some(key.clone());
                contents.push((key.as_str(), object));
            }
        }
    }
    let mut doc = Document::new("ListBucketResult");
    doc.leaf("Name", bucket_name).leaf("Prefix", &encode(&query.prefix));
    if query.v2 {
        doc.leaf("KeyCount", &(contents.len() + prefixes.len()).to_string());
        if let Some(token) = &query.continuation_token {
            doc.leaf("ContinuationToken", token);
        }
        if let Some(start) = &query.start_after {
            doc.leaf("StartAfter", &encode(start));
        }
    } else {
        doc.leaf("Marker", &encode(query.marker.as_deref().unwrap_or_default()));
    }
    doc.leaf("MaxKeys", &query.max_keys.to_string());
    if let Some(d) = &query.delimiter {
        doc.leaf("Delimiter", &encode(d));
    }
    if query.url_encoded {
        doc.leaf("EncodingType", "url");
    }
    doc.leaf("IsTruncated", if truncated { "true" } else { "false" });
    if truncated && let Some(last) = &last {
        if query.v2 {
            doc.leaf("NextContinuationToken", &body::base64(last.as_bytes()));
        } else if query.delimiter.is_some() {
            doc.leaf("NextMarker", &encode(last));
        }
    }
    for (key, object) in contents {
        doc.open("Contents")
            .leaf("Key", &encode(key))
            .leaf("LastModified", &iso_date(object.modified_ms))
            .leaf("ETag", &object.etag)
            .leaf("Size", &object.body.len().to_string())
            .leaf("StorageClass", "STANDARD");
        if !query.v2 {
            doc.open("Owner").leaf("ID", OWNER_ID).leaf("DisplayName", "twice").close("Owner");
        }
        doc.close("Contents");
    }
    for prefix in prefixes {
        doc.open("CommonPrefixes").leaf("Prefix", &encode(&prefix)).close("CommonPrefixes");
    }
    xml_response(200, doc)
}

/// Percent-encodes all but unreserved characters and `/`, as S3's `encoding-type=url` does.
fn url_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
