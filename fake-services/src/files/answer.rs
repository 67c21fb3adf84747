//! The pieces answers are made of: S3's common errors, an empty answer, an XML document as an
//! answer, and the stamp (`x-amz-request-id`, `x-amz-id-2`, `Server`) every answer carries.
//!
//! Shared by every operation, so that one error reads the same wherever it is raised.

use bytes::Bytes;

use super::body;
use super::xml::{self, Document, S3Error};
use crate::wire::FakeResponse;

/// S3 answers these 501; the fake answers 400, since without a fault it never answers 5xx
/// (a 5xx invites retries, and a harness reads it as the service failing).
pub(super) fn not_implemented(what: &str) -> S3Error {
    S3Error::new(400, "NotImplemented", format!("The files fake does not implement {what}."))
}

/// What S3 answers a request its caller's permissions (a bucket policy, an IAM policy) do not
/// allow.
pub(super) fn access_denied() -> S3Error {
    S3Error::new(403, "AccessDenied", "Access Denied")
}

pub(super) fn no_such_bucket(bucket: &str) -> S3Error {
    S3Error::new(404, "NoSuchBucket", "The specified bucket does not exist").with("BucketName", bucket)
}

pub(super) fn no_such_key(key: &str) -> S3Error {
    S3Error::new(404, "NoSuchKey", "The specified key does not exist.").with("Key", key)
}

pub(super) fn precondition_failed(condition: &str) -> S3Error {
    S3Error::new(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
        .with("Condition", condition)
}

pub(super) fn invalid_argument(name: &str, value: &str, message: &str) -> S3Error {
    S3Error::new(400, "InvalidArgument", message).with("ArgumentName", name).with("ArgumentValue", value)
}

pub(super) fn empty(status: u16) -> FakeResponse {
    FakeResponse { status, headers: Vec::new(), body: Bytes::new() }
}

/// The headers every answer carries; an error document gets the request's id as well.
pub(super) fn stamp(response: &mut FakeResponse, request_id: &str) {
    let digest = body::md5(request_id.as_bytes());
    let mut host = digest.to_vec();
    host.extend_from_slice(&body::md5(&digest));
    let host_id = body::base64(&host);
    response.headers.retain(|(n, _)| {
        !n.eq_ignore_ascii_case("x-amz-request-id") && !n.eq_ignore_ascii_case("x-amz-id-2")
    });
    if response.status >= 400
        && let Some(filled) = xml::fill_request_id(&response.body, request_id, &host_id)
    {
        response.body = filled;
    }
    response.headers.push(("x-amz-request-id".into(), request_id.into()));
    response.headers.push(("x-amz-id-2".into(), host_id));
    if !response.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("server")) {
        response.headers.push(("server".into(), "AmazonS3".into()));
    }
}

pub(super) fn xml_response(status: u16, doc: Document) -> FakeResponse {
    FakeResponse { status, headers: vec![xml::content_type_xml()], body: doc.finish() }
}
