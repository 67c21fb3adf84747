//! Routing: which S3 operation a request asks for ([`Op`]), from its method, path and query.
//!
//! Kept apart so that the whole surface the fake answers is in one place, with what it
//! refuses before any state is touched: bad bucket names and URIs, keys over the limit,
//! subresources it does not implement, versions other than `null`, part numbers out of range.

use super::answer::{invalid_argument, not_implemented};
use super::http::{KEY_BYTES_MAX, check_bucket_name, percent_decode};
use super::xml::S3Error;
use crate::wire::FakeRequest;

/// Query parameters that name an S3 subresource the fake does not implement. A request with
/// one is refused rather than served as if the parameter were absent: `PUT ?tagging` must
/// not overwrite the object with the tagging document.
const UNIMPLEMENTED_SUBRESOURCES: &[&str] = &[
    "accelerate",
    "acl",
    "analytics",
    "attributes",
    "cors",
    "encryption",
    "intelligent-tiering",
    "inventory",
    "legal-hold",
    "lifecycle",
    "location",
    "logging",
    "metrics",
    "notification",
    "object-lock",
    "ownershipControls",
    "policy",
    "policyStatus",
    "publicAccessBlock",
    "replication",
    "requestPayment",
    "restore",
    "retention",
    "select",
    "tagging",
    "torrent",
    "versioning",
    "versions",
    "website",
];

/// The multipart subresources: `?uploads` (create), `?uploadId=` (the upload's parts,
/// complete, abort) and `?partNumber=` (a part).
const MULTIPART_SUBRESOURCES: &[&str] = &["uploads", "uploadId", "partNumber"];

/// S3's part numbers.
const PART_NUMBERS: std::ops::RangeInclusive<u32> = 1..=10_000;

/// What a request asks for.
#[derive(Debug)]
pub(super) enum Op {
    ListBuckets,
    CreateBucket { bucket: String },
    HeadBucket { bucket: String },
    ListObjects { bucket: String },
    DeleteBucket { bucket: String },
    DeleteObjects { bucket: String },
    PutObject { bucket: String, key: String },
    GetObject { bucket: String, key: String },
    DeleteObject { bucket: String, key: String },
    CreateMultipartUpload { bucket: String, key: String },
    UploadPart { bucket: String, key: String, upload_id: String, part_number: u32 },
    CompleteMultipartUpload { bucket: String, key: String, upload_id: String },
    AbortMultipartUpload { bucket: String, key: String, upload_id: String },
    ListParts { bucket: String, key: String, upload_id: String },
}

impl Op {
    /// The bucket of a request that would store, delete or upload an object (what a policy
    /// denying writes refuses); `None` for reads and bucket requests.
    pub(super) fn object_write(&self) -> Option<&str> {
        match self {
            Op::PutObject { bucket, .. }
            | Op::DeleteObject { bucket, .. }
            | Op::DeleteObjects { bucket }
            | Op::CreateMultipartUpload { bucket, .. }
            | Op::UploadPart { bucket, .. }
            | Op::CompleteMultipartUpload { bucket, .. }
            | Op::AbortMultipartUpload { bucket, .. } => Some(bucket),
            Op::ListBuckets
            | Op::CreateBucket { .. }
            | Op::HeadBucket { .. }
            | Op::ListObjects { .. }
            | Op::DeleteBucket { .. }
            | Op::GetObject { .. }
            | Op::ListParts { .. } => None,
        }
    }

    /// S3's name for the operation (what a rule's `where = {operation = ...}` matches).
    pub(super) fn name(&self, method: &str) -> &'static str {
        match self {
            Op::ListBuckets => "ListBuckets",
            Op::CreateBucket { .. } => "CreateBucket",
            Op::HeadBucket { .. } => "HeadBucket",
            Op::ListObjects { .. } => "ListObjects",
            Op::DeleteBucket { .. } => "DeleteBucket",
            Op::DeleteObjects { .. } => "DeleteObjects",
            Op::PutObject { .. } => "PutObject",
            Op::GetObject { .. } if method == "HEAD" => "HeadObject",
            Op::GetObject { .. } => "GetObject",
            Op::DeleteObject { .. } => "DeleteObject",
            Op::CreateMultipartUpload { .. } => "CreateMultipartUpload",
            Op::UploadPart { .. } => "UploadPart",
            Op::CompleteMultipartUpload { .. } => "CompleteMultipartUpload",
            Op::AbortMultipartUpload { .. } => "AbortMultipartUpload",
            Op::ListParts { .. } => "ListParts",
        }
    }
}

pub(super) fn route(req: &FakeRequest) -> Result<Op, S3Error> {
    let method = req.method.as_str();
    let path = req.path.strip_prefix('/').unwrap_or(&req.path);
    let invalid_uri =
        || S3Error::new(400, "InvalidURI", "Couldn't parse the specified URI.").with("URI", req.path.clone());
    let query = req.query_pairs();
    let has = |name: &str| query.iter().any(|(n, _)| n == name);
    if path.is_empty() {
        return match method {
            "GET" => Ok(Op::ListBuckets),
            _ => Err(method_not_allowed(method, "SERVICE")),
        };
    }
    let (raw_bucket, raw_key) = path.split_once('/').unwrap_or((path, ""));
    let bucket = percent_decode(raw_bucket).ok_or_else(invalid_uri)?;
    if check_bucket_name(&bucket).is_err() {
        return Err(S3Error::new(400, "InvalidBucketName", "The specified bucket is not valid.")
            .with("BucketName", bucket));
    }
    let bucket_level = raw_key.is_empty();
    for (name, value) in &query {
        if UNIMPLEMENTED_SUBRESOURCES.contains(&name.as_str()) || (name == "delete" && !bucket_level) {
            return Err(not_implemented(&format!("the ?{name} subresource")));
        }
        if name == "versionId" && value != "null" {
            return Err(S3Error::new(400, "InvalidArgument", "Invalid version id specified")
                .with("ArgumentName", "versionId")
                .with("ArgumentValue", value.clone()));
        }
    }
    let multipart: Vec<&str> =
        query.iter().map(|(n, _)| n.as_str()).filter(|n| MULTIPART_SUBRESOURCES.contains(n)).collect();
    if bucket_level && !multipart.is_empty() {
        return Err(not_implemented("ListMultipartUploads (?uploads on a bucket)"));
    }
    if bucket_level {
        return match method {
            "PUT" => Ok(Op::CreateBucket { bucket }),
            "HEAD" => Ok(Op::HeadBucket { bucket }),
            "GET" => Ok(Op::ListObjects { bucket }),
            "DELETE" => Ok(Op::DeleteBucket { bucket }),
            "POST" if has("delete") => Ok(Op::DeleteObjects { bucket }),
            _ => Err(method_not_allowed(method, "BUCKET")),
        };
    }
    let key = percent_decode(raw_key).ok_or_else(invalid_uri)?;
    if key.len() > KEY_BYTES_MAX {
        return Err(S3Error::new(400, "KeyTooLongError", "Your key is too long")
            .with("Size", key.len().to_string())
            .with("MaxSizeAllowed", KEY_BYTES_MAX.to_string()));
    }
    if !multipart.is_empty() {
        return multipart_op(req, method, bucket, key, &multipart);
    }
    match method {
        "PUT" => Ok(Op::PutObject { bucket, key }),
        "GET" | "HEAD" => Ok(Op::GetObject { bucket, key }),
        "DELETE" => Ok(Op::DeleteObject { bucket, key }),
        _ => Err(method_not_allowed(method, "OBJECT")),
    }
}

/// An object request with multipart subresources (`names`, in the order they came).
fn multipart_op(
    req: &FakeRequest,
    method: &str,
    bucket: String,
    key: String,
    names: &[&str],
) -> Result<Op, S3Error> {
    let value = |name: &str| req.query_pairs().into_iter().find(|(n, _)| n == name).map(|(_, v)| v);
    let upload_id = value("uploadId");
    let part_number = value("partNumber");
    let uploads = names.contains(&"uploads");
    match (method, uploads, upload_id, part_number) {
        ("POST", true, None, None) => Ok(Op::CreateMultipartUpload { bucket, key }),
        ("PUT", false, Some(upload_id), Some(number)) => {
            let part_number =
                number.trim().parse::<u32>().ok().filter(|n| PART_NUMBERS.contains(n)).ok_or_else(|| {
                    invalid_argument(
                        "partNumber",
                        &number,
                        "Part number must be an integer between 1 and 10000, inclusive",
                    )
                })?;
            Ok(Op::UploadPart { bucket, key, upload_id, part_number })
        }
        ("POST", false, Some(upload_id), None) => Ok(Op::CompleteMultipartUpload { bucket, key, upload_id }),
        ("DELETE", false, Some(upload_id), None) => Ok(Op::AbortMultipartUpload { bucket, key, upload_id }),
        ("GET", false, Some(upload_id), None) => Ok(Op::ListParts { bucket, key, upload_id }),
        // GetObject by part number, and any other mix, are not served: answering them as the
        // plain operation would read or write something the caller did not ask for.
        _ => Err(not_implemented(&format!("{method} with ?{}", names.join("&")))),
    }
}

fn method_not_allowed(method: &str, resource: &str) -> S3Error {
    S3Error::new(405, "MethodNotAllowed", "The specified method is not allowed against this resource.")
        .with("Method", method)
        .with("ResourceType", resource)
}
