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
use super::store::{Bucket, FilesState, Object};
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

/// `GET /{bucket}`: a page of the keys `query` asks for, as S3 writes it.
pub(super) fn list_objects(
    inner: &mut Inner<FilesState>,
    bucket_name: &str,
    query: &ListQuery,
    until_ms: u64,
) -> FakeResponse {
    let Some(bucket) = inner.state.buckets.get(bucket_name) else {
        return no_such_bucket(bucket_name).response("GET");
    };
    let page = page(bucket, query, until_ms);
    xml_response(200, page_document(bucket_name, query, page))
}

/// One page of a listing: the objects and common prefixes on it, in key order, and where a
/// truncated one ended.
struct Page<'b> {
    contents: Vec<(&'b str, &'b Arc<Object>)>,
    prefixes: Vec<String>,
    truncated: bool,
    /// The last key or common prefix on the page, which the next page starts after.
    last: Option<String>,
}

/// The keys of `bucket` visible at `until_ms` under the query's prefix, after its marker,
/// those past the delimiter rolled up into common prefixes, at most `max_keys` of both.
fn page<'b>(bucket: &'b Bucket, query: &ListQuery, until_ms: u64) -> Page<'b> {
    let mut page = Page { contents: Vec::new(), prefixes: Vec::new(), truncated: false, last: None };
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
            && page.prefixes.last() == Some(prefix)
        {
            continue;
        }
        if page.contents.len() + page.prefixes.len() == query.max_keys {
            page.truncated = true;
            break;
        }
        match rolled {
            Some(prefix) => {
                page.last = Some(prefix.clone());
                page.prefixes.push(prefix);
            }
            None => {
                page.last = Some(key.clone());
                page.contents.push((key.as_str(), object));
            }
        }
    }
    page
}

/// The `ListBucketResult` of `page`: V1 or V2 as the query asks, its keys URL-encoded where it
/// asks that, and the marker or token that gets the next page where it is truncated.
fn page_document(bucket_name: &str, query: &ListQuery, page: Page<'_>) -> Document {
    let encode = |text: &str| if query.url_encoded { url_encode(text) } else { text.to_string() };
    let Page { contents, prefixes, truncated, last } = page;
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
    doc
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
