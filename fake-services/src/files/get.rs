//! GetObject and HeadObject: the object as the read's view sees it, conditional reads
//! (`If-Match`, `If-None-Match`, `If-Modified-Since`, `If-Unmodified-Since` in RFC 9110's
//! order), single byte ranges, `response-*` header overrides and checksum mode.

use super::answer::{empty, no_such_bucket, no_such_key, precondition_failed};
use super::http::{Range, etag_matches, etags, http_date, parse_http_date, parse_range};
use super::store::FilesState;
use super::xml::S3Error;
use crate::core::Inner;
use crate::wire::{FakeRequest, FakeResponse};

/// The content type S3 gives an object stored without one.
const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

/// What a GET or HEAD asks besides the key.
#[derive(Debug, Default)]
pub(super) struct GetRequest {
    method: String,
    if_match: Option<Vec<String>>,
    if_none_match: Option<Vec<String>>,
    if_modified_since_ms: Option<u64>,
    if_unmodified_since_ms: Option<u64>,
    range: Option<String>,
    checksum_mode: bool,
    /// `response-content-type` and its kin: headers the answer carries instead of the stored ones.
    overrides: Vec<(String, String)>,
}

impl GetRequest {
    pub(super) fn parse(req: &FakeRequest) -> GetRequest {
        let text = |name: &str| req.header_str(name).map(str::to_string);
        let overrides = req
            .query_pairs()
            .into_iter()
            .filter_map(|(name, value)| {
                let header = name.strip_prefix("response-")?;
                matches!(
                    header,
                    "content-type"
                        | "content-language"
                        | "expires"
                        | "cache-control"
                        | "content-disposition"
                        | "content-encoding"
                )
                .then(|| (header.to_string(), value))
            })
            .collect();
        GetRequest {
            method: req.method.clone(),
            if_match: text("if-match").map(|v| etags(&v)),
            if_none_match: text("if-none-match").map(|v| etags(&v)),
            if_modified_since_ms: text("if-modified-since").and_then(|v| parse_http_date(&v)),
            if_unmodified_since_ms: text("if-unmodified-since").and_then(|v| parse_http_date(&v)),
            range: text("range"),
            checksum_mode: text("x-amz-checksum-mode").is_some_and(|v| v.eq_ignore_ascii_case("ENABLED")),
            overrides,
        }
    }
}

pub(super) fn get_object(
    inner: &mut Inner<FilesState>,
    bucket: &str,
    key: &str,
    get: &GetRequest,
    until_ms: u64,
) -> FakeResponse {
    let method = get.method.as_str();
    let Some(b) = inner.state.buckets.get(bucket) else { return no_such_bucket(bucket).response(method) };
    let Some(object) = b.visible(key, until_ms) else { return no_such_key(key).response(method) };
    let last_modified = http_date(object.modified_ms);
    // HTTP dates have whole seconds; so do the comparisons.
    let modified_s = object.modified_ms / 1000;
    // RFC 9110's order: If-Match, else If-Unmodified-Since; then If-None-Match, else
    // If-Modified-Since.
    if let Some(tags) = &get.if_match {
        if !etag_matches(tags, &object.etag) {
            return precondition_failed("If-Match").response(method);
        }
    } else if let Some(since) = get.if_unmodified_since_ms
        && modified_s > since / 1000
    {
        return precondition_failed("If-Unmodified-Since").response(method);
    }
    let not_modified = match (&get.if_none_match, get.if_modified_since_ms) {
        (Some(tags), _) => etag_matches(tags, &object.etag),
        (None, Some(since)) => modified_s <= since / 1000,
        (None, None) => false,
    };
    if not_modified {
        return empty(304).with_header("etag", &object.etag).with_header("last-modified", &last_modified);
    }
    let size = object.body.len() as u64;
    let (status, body, content_range) = match parse_range(get.range.as_deref(), size) {
        Range::Whole => (200, object.body.clone(), None),
        Range::Part { start, end } => (
            206,
            object.body.slice(start as usize..=end as usize),
            Some(format!("bytes {start}-{end}/{size}")),
        ),
        Range::Unsatisfiable => {
            return S3Error::new(416, "InvalidRange", "The requested range is not satisfiable")
                .with("RangeRequested", get.range.clone().unwrap_or_default())
                .with("ActualObjectSize", size.to_string())
                .response(method);
        }
    };
    let mut response = empty(status)
        .with_header("etag", &object.etag)
        .with_header("last-modified", &last_modified)
        .with_header("accept-ranges", "bytes")
        .with_header("content-length", &body.len().to_string());
    let mut headers: Vec<(String, String)> = object.headers.clone();
    if !headers.iter().any(|(n, _)| n == "content-type") {
        headers.push(("content-type".into(), DEFAULT_CONTENT_TYPE.into()));
    }
    for (name, value) in &get.overrides {
        headers.retain(|(n, _)| n != name);
        headers.push((name.clone(), value.clone()));
    }
    response.headers.extend(headers);
    if let Some(range) = content_range {
        response = response.with_header("content-range", &range);
    } else if get.checksum_mode {
        // A checksum covers the whole object, so S3 sends it only with the whole object.
        response = response
            .with_header("x-amz-checksum-crc32", &object.crc32)
            .with_header("x-amz-checksum-type", "FULL_OBJECT");
    }
    if method != "HEAD" {
        response.body = body;
    }
    response
}
