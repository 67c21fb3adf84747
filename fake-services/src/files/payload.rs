//! What a write carries besides its path: the body once `aws-chunked` framing is removed and
//! every checksum verified ([`read_payload`]), the headers stored with an object
//! ([`stored_headers`]), and header values read as text ([`header`]).
//!
//! Separate from PUT because DeleteObjects reads its body the same way, and because the
//! checks (decoded length, trailers, `Content-MD5`, `x-amz-content-sha256`,
//! `x-amz-checksum-*`) are most of what a malformed upload meets.

use std::collections::BTreeSet;

use bytes::Bytes;

use super::answer::invalid_argument;
use super::body::{self, ChunkError, Verdict};
use super::xml::S3Error;
use crate::wire::FakeRequest;

/// S3's limit on user metadata (`x-amz-meta-*` names and values together), in bytes.
pub const METADATA_BYTES_MAX: usize = 2 * 1024;

/// Headers stored with an object and sent back on GET and HEAD (besides `x-amz-meta-*`).
const STORED_HEADERS: &[&str] =
    &["cache-control", "content-disposition", "content-language", "content-type", "expires"];

/// A PUT's body once framing is removed, and the checksum the client sent with it.
pub(super) struct Payload {
    pub(super) bytes: Bytes,
    /// `(x-amz-checksum-ALGO, value)`, echoed back as S3 does.
    pub(super) checksum: Option<(String, String)>,
}

/// Reads the body of a PUT or POST: decodes `aws-chunked`, checks the decoded length, the
/// trailers, `Content-MD5`, `x-amz-content-sha256` and the `x-amz-checksum-*` value.
pub(super) fn read_payload(req: &FakeRequest) -> Result<Payload, S3Error> {
    let content_sha = header(req, "x-amz-content-sha256")?;
    let encodings = header(req, "content-encoding")?.unwrap_or_default().to_ascii_lowercase();
    let streaming = content_sha.as_deref().is_some_and(|v| v.starts_with("STREAMING-"));
    let chunked = streaming || encodings.split(',').any(|e| e.trim() == "aws-chunked");
    let (bytes, trailers) =
        if chunked { chunked_body(req)? } else { plain_body(req, content_sha.as_deref())? };
    check_md5(req, &bytes)?;
    let checksums = checksums(req, &trailers, &bytes)?;
    check_sdk_algorithm(req, &checksums)?;
    Ok(Payload { bytes, checksum: checksums.into_iter().next() })
}

/// S3's answer to a body shorter than it says it is.
fn incomplete() -> S3Error {
    S3Error::new(
        400,
        "IncompleteBody",
        "You did not provide the number of bytes specified by the Content-Length HTTP header",
    )
}

/// S3's answer to trailers that are not well-formed or not the ones `x-amz-trailer` names.
fn malformed_trailer() -> S3Error {
    S3Error::new(
        400,
        "MalformedTrailerError",
        "The request contained trailing data that was not well-formed or did not conform to our published schema.",
    )
}

/// An `aws-chunked` body decoded, with its trailers: as long as its
/// `x-amz-decoded-content-length` says, and carrying every trailer `x-amz-trailer` names.
fn chunked_body(req: &FakeRequest) -> Result<(Bytes, Vec<(String, String)>), S3Error> {
    let decoded = body::decode_aws_chunked(&req.body).map_err(|e| match e {
        ChunkError::Incomplete => {
            S3Error::new(400, "IncompleteBody", "The request body terminated unexpectedly")
        }
        ChunkError::Framing(why) => {
            S3Error::new(400, "InvalidRequest", format!("Invalid aws-chunked body: {why}."))
        }
        ChunkError::Trailer => malformed_trailer(),
    })?;
    if let Some(declared) = header(req, "x-amz-decoded-content-length")? {
        let declared: usize = declared.trim().parse().map_err(|_| {
            invalid_argument(
                "x-amz-decoded-content-length",
                &declared,
                "x-amz-decoded-content-length must be a non-negative integer",
            )
        })?;
        if decoded.payload.len() < declared {
            return Err(incomplete());
        }
        if decoded.payload.len() > declared {
            return Err(S3Error::new(
                400,
                "InvalidRequest",
                "The aws-chunked body is longer than x-amz-decoded-content-length.",
            ));
        }
    }
    for name in header(req, "x-amz-trailer")?.unwrap_or_default().split(',') {
        let name = name.trim().to_ascii_lowercase();
        if !name.is_empty() && !decoded.trailers.iter().any(|(n, _)| *n == name) {
            return Err(malformed_trailer());
        }
    }
    Ok((Bytes::from(decoded.payload), decoded.trailers))
}

/// A body sent as it is, checked against its `x-amz-content-sha256` where that is a digest
/// (and refused where it is neither a digest nor a payload mode S3 knows).
fn plain_body(
    req: &FakeRequest,
    content_sha: Option<&str>,
) -> Result<(Bytes, Vec<(String, String)>), S3Error> {
    match content_sha {
        Some(sha) if sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()) => {
            if !sha.eq_ignore_ascii_case(&body::sha256_hex(&req.body)) {
                return Err(S3Error::new(
                    400,
                    "XAmzContentSHA256Mismatch",
                    "The provided 'x-amz-content-sha256' header does not match what was computed.",
                )
                .with("ClientComputedContentSHA256", sha)
                .with("S3ComputedContentSHA256", body::sha256_hex(&req.body)));
            }
        }
        None | Some("UNSIGNED-PAYLOAD") => {}
        Some(other) => {
            return Err(invalid_argument(
                "x-amz-content-sha256",
                other,
                "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, or a valid sha256 value.",
            ));
        }
    }
    // A copy, not a clone: a small body is a slice of the connection's whole read buffer,
    // which a stored object would otherwise keep alive (8 KiB or more per object).
    Ok((Bytes::copy_from_slice(&req.body), Vec::new()))
}

/// The body against its `Content-MD5`, where the request has one: a digest of 16 bytes, and
/// the body's.
fn check_md5(req: &FakeRequest, bytes: &[u8]) -> Result<(), S3Error> {
    if let Some(md5) = header(req, "content-md5")? {
        let given = body::unbase64(&md5).filter(|d| d.len() == 16).ok_or_else(|| {
            S3Error::new(400, "InvalidDigest", "The Content-MD5 you specified was invalid.")
                .with("Content-MD5", &md5)
        })?;
        if given != body::md5(bytes) {
            return Err(S3Error::new(
                400,
                "BadDigest",
                "The Content-MD5 you specified did not match what we received.",
            )
            .with("ExpectedDigest", md5)
            .with("CalculatedDigest", body::base64(&body::md5(bytes))));
        }
    }
    Ok(())
}

/// The `x-amz-checksum-*` values a request sends, as headers or trailers: of one algorithm
/// at most, each valid and matching the body.
fn checksums(
    req: &FakeRequest,
    trailers: &[(String, String)],
    bytes: &[u8],
) -> Result<Vec<(String, String)>, S3Error> {
    let mut checksums: Vec<(String, String)> = Vec::new();
    for (algorithm, _) in body::CHECKSUMS {
        let name = format!("x-amz-checksum-{algorithm}");
        if let Some(value) = header(req, &name)? {
            checksums.push((name.clone(), value));
        }
        if let Some((_, value)) = trailers.iter().find(|(n, _)| *n == name) {
            checksums.push((name, value.clone()));
        }
    }
    let algorithms: BTreeSet<&str> = checksums.iter().map(|(n, _)| n.as_str()).collect();
    if algorithms.len() > 1 {
        return Err(S3Error::new(
            400,
            "InvalidRequest",
            "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
        ));
    }
    for (name, value) in &checksums {
        let algorithm = name.trim_start_matches("x-amz-checksum-");
        match body::check_checksum(algorithm, value, bytes) {
            Ok(Verdict::Matches) => {}
            Ok(Verdict::Differs) => {
                return Err(S3Error::new(
                    400,
                    "BadDigest",
                    format!(
                        "The {} you specified did not match the calculated checksum.",
                        algorithm.to_ascii_uppercase()
                    ),
                ));
            }
            Err(()) => {
                return Err(S3Error::new(
                    400,
                    "InvalidRequest",
                    format!("Value for {name} header is invalid."),
                ));
            }
        }
    }
    Ok(checksums)
}

/// `x-amz-sdk-checksum-algorithm`, where the request has it: an algorithm S3 knows, whose
/// checksum the request sends (as a header, or announced as a trailer).
fn check_sdk_algorithm(req: &FakeRequest, checksums: &[(String, String)]) -> Result<(), S3Error> {
    if let Some(algorithm) = header(req, "x-amz-sdk-checksum-algorithm")? {
        let lower = algorithm.trim().to_ascii_lowercase();
        if !body::CHECKSUMS.iter().any(|(name, _)| *name == lower) {
            return Err(S3Error::new(
                400,
                "InvalidRequest",
                "Value for x-amz-sdk-checksum-algorithm header is invalid.",
            ));
        }
        if checksums.is_empty() && !req.headers.contains_key("x-amz-trailer") {
            return Err(S3Error::new(
                400,
                "InvalidRequest",
                "x-amz-sdk-checksum-algorithm specified, but no corresponding x-amz-checksum-* or x-amz-trailer headers were found.",
            ));
        }
    }
    Ok(())
}

/// Without a Content-Length (HTTP chunked transfer), S3 takes an upload only as an
/// aws-chunked body that says its decoded length, as the SDKs send over TLS.
pub(super) fn require_length(req: &FakeRequest) -> Result<(), S3Error> {
    if req.headers.contains_key("transfer-encoding")
        && !req.headers.contains_key("content-length")
        && !req.headers.contains_key("x-amz-decoded-content-length")
    {
        return Err(S3Error::new(
            411,
            "MissingContentLength",
            "You must provide the Content-Length HTTP header.",
        ));
    }
    Ok(())
}

/// A header's value as text; a header that is present but not text is a 400, since S3
/// could not read it either.
pub(super) fn header(req: &FakeRequest, name: &str) -> Result<Option<String>, S3Error> {
    match req.headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(|s| Some(s.to_string())).map_err(|_| {
            S3Error::new(400, "InvalidArgument", format!("The {name} header is not valid text."))
                .with("ArgumentName", name)
        }),
    }
}

/// The user metadata among an object's stored headers, as its `object.put` effect keeps it:
/// each `x-amz-meta-NAME` as `NAME` (header names are lowercase) to its value; `{}` when none.
pub(super) fn user_metadata(stored: &[(String, String)]) -> serde_json::Value {
    let metadata: serde_json::Map<String, serde_json::Value> = stored
        .iter()
        .filter_map(|(name, value)| {
            name.strip_prefix("x-amz-meta-")
                .map(|meta| (meta.to_string(), serde_json::Value::from(value.as_str())))
        })
        .collect();
    serde_json::Value::Object(metadata)
}

/// The headers a PUT stores with its object.
pub(super) fn stored_headers(req: &FakeRequest) -> Result<Vec<(String, String)>, S3Error> {
    let mut stored = Vec::new();
    let mut metadata_bytes = 0;
    for (name, value) in &req.headers {
        let name = name.as_str();
        let Ok(value) = value.to_str() else { continue };
        if let Some(meta) = name.strip_prefix("x-amz-meta-") {
            metadata_bytes += meta.len() + value.len();
            stored.push((name.to_string(), value.to_string()));
        } else if STORED_HEADERS.contains(&name) {
            stored.push((name.to_string(), value.to_string()));
        } else if name == "content-encoding" {
            // `aws-chunked` is the framing of this request, not the object's encoding.
            let kept: Vec<&str> = value
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
                .collect();
            if !kept.is_empty() {
                stored.push((name.to_string(), kept.join(",")));
            }
        }
    }
    if metadata_bytes > METADATA_BYTES_MAX {
        return Err(S3Error::new(
            400,
            "MetadataTooLarge",
            "Your metadata headers exceed the maximum allowed metadata size.",
        )
        .with("Size", metadata_bytes.to_string())
        .with("MaxSizeAllowed", METADATA_BYTES_MAX.to_string()));
    }
    Ok(stored)
}
