//! Files: an S3-style object store, path style, that boto3 talks to unchanged.
//!
//! Objects: `PUT`, `GET`, `HEAD`, `DELETE /{bucket}/{key}` (the key percent-decoded, any UTF-8,
//! at most 1024 bytes). Buckets: `PUT /{bucket}` (CreateBucket), `HEAD`, `DELETE`,
//! `GET /{bucket}` (ListObjects, V1 and V2), `POST /{bucket}?delete` (DeleteObjects), and
//! `GET /` (ListBuckets). ETags are the quoted MD5 of the body. Conditional writes:
//! `If-None-Match: *` and `If-Match: "<etag>"` on PUT (and `If-Match` on DELETE) answer 412
//! `PreconditionFailed`; a conditional write that arrives while another conditional write on
//! the same key is between its arrival and its commit answers 409
//! `ConditionalRequestConflict`. Reads honour `If-Match`, `If-None-Match`,
//! `If-Modified-Since`, `If-Unmodified-Since` and single byte ranges.
//!
//! Bodies: plain, or `aws-chunked` with chunk signatures and checksum trailers; `Content-MD5`,
//! `x-amz-checksum-crc32`, `x-amz-checksum-sha256` and a hex `x-amz-content-sha256` are
//! verified; SigV4 signatures are accepted without verification. Errors are S3's XML
//! document, and every answer carries `x-amz-request-id` and `x-amz-id-2`.
//!
//! Effects: `object.put` for every PUT that stores an object, `object.deleted` for every
//! delete that removed one (see `docs/faults.md`). Buckets and seeded objects are not effects.

mod body;
mod http;
mod xml;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::clock::ServiceClock;
use crate::contract::Contract;
use crate::core::{Commit, Ctx, Inner, Mode, Outcome, ServiceCore, Shape, Stamp};
use crate::record::Effect;
use crate::wire::{Disposition, FakeRequest, FakeResponse};

pub use http::{KEY_BYTES_MAX, check_bucket_name};
pub use xml::{S3Error, error_body};

use body::{ChunkError, Verdict};
use http::{Range, etag_matches, etags, http_date, iso_date, parse_http_date, parse_range, percent_decode};
use xml::Document;

/// The service's name in rules, ledgers and URLs files.
pub const NAME: &str = "files";

/// How far back a stale read can look: the longest lag a `stale_read` rule may ask for.
/// Older versions of an object are forgotten.
const HISTORY_MS: u64 = crate::rule::HOLD_MS_MAX;

/// S3's limit on user metadata (`x-amz-meta-*` names and values together), in bytes.
const METADATA_BYTES_MAX: usize = 2 * 1024;

/// The content type S3 gives an object stored without one.
const DEFAULT_CONTENT_TYPE: &str = "binary/octet-stream";

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
    "partNumber",
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
    "uploadId",
    "uploads",
    "versioning",
    "versions",
    "website",
];

/// Headers stored with an object and sent back on GET and HEAD (besides `x-amz-meta-*`).
const STORED_HEADERS: &[&str] =
    &["cache-control", "content-disposition", "content-language", "content-type", "expires"];

/// One stored object.
#[derive(Debug)]
struct Object {
    body: Bytes,
    /// Quoted, as in the `ETag` header.
    etag: String,
    /// `x-amz-checksum-crc32` of the body, computed for every object so that a GET with
    /// checksum mode on can always be validated.
    crc32: String,
    modified_ms: u64,
    /// Stored headers (lowercase names) in the order they came.
    headers: Vec<(String, String)>,
}

/// A key's state from some service time on: an object, or nothing (deleted).
#[derive(Debug, Clone)]
struct Version {
    at_ms: u64,
    object: Option<Arc<Object>>,
}

#[derive(Debug, Default)]
struct Bucket {
    created_ms: u64,
    /// Per key, its versions in commit order; the last is the current one.
    keys: BTreeMap<String, Vec<Version>>,
}

impl Bucket {
    fn current(&self, key: &str) -> Option<&Arc<Object>> {
        self.keys.get(key)?.last()?.object.as_ref()
    }

    /// The object as a read that sees only commits up to `until_ms` finds it.
    fn visible(&self, key: &str, until_ms: u64) -> Option<&Arc<Object>> {
        self.keys.get(key)?.iter().rev().find(|v| v.at_ms <= until_ms)?.object.as_ref()
    }

    fn has_objects(&self) -> bool {
        self.keys.values().any(|versions| versions.last().is_some_and(|v| v.object.is_some()))
    }

    /// Records the key's new state and forgets versions no stale read can reach.
    fn set(&mut self, key: &str, at_ms: u64, object: Option<Arc<Object>>) {
        let versions = self.keys.entry(key.to_string()).or_default();
        versions.push(Version { at_ms, object });
        let horizon = at_ms.saturating_sub(HISTORY_MS);
        while versions.len() > 1 && versions[1].at_ms <= horizon {
            versions.remove(0);
        }
        if let [only] = versions.as_slice()
            && only.object.is_none()
            && only.at_ms <= horizon
        {
            self.keys.remove(key);
        }
    }
}

/// The files fake's buckets and objects.
#[derive(Debug, Default)]
pub struct FilesState {
    buckets: BTreeMap<String, Bucket>,
    /// Conditional writes between their arrival and their commit, by `bucket/key`, with the
    /// claim number of the request that holds each.
    conditional: BTreeMap<String, u64>,
}

/// The files fake. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Files {
    core: Arc<ServiceCore<FilesState>>,
    /// Numbers the claims of conditional writes on their keys. It outlives a reset, so that a
    /// request in flight across one cannot end a newer request's claim.
    claims: Arc<AtomicU64>,
}

impl Files {
    pub fn new(clock: ServiceClock, seed: u64) -> Self {
        let shape = Shape { error: error_body, stamp };
        Files {
            core: Arc::new(ServiceCore::new(NAME, clock, seed, Contract::files_default(), shape)),
            claims: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn core(&self) -> &Arc<ServiceCore<FilesState>> {
        &self.core
    }

    /// Creates a bucket (no effect; an existing bucket stays as it is).
    pub fn seed_bucket(&self, name: &str) -> Result<(), String> {
        let mut inner = self.core.lock();
        let now_ms = self.core.clock.now_ms();
        seed_bucket(&mut inner.state, name, now_ms)
    }

    /// Stores an object as if it had always been there (no effect; stale reads see it too),
    /// creating its bucket if needed; returns its quoted ETag.
    pub fn seed_object(&self, bucket: &str, key: &str, body: &[u8]) -> Result<String, String> {
        let now_ms = self.core.clock.now_ms();
        seed_object(&mut self.core.lock().state, bucket, key, body, None, now_ms)
    }

    /// Fields a rule can match: `bucket`, `key` (both decoded) and the query parameters.
    pub fn fields(req: &FakeRequest) -> BTreeMap<String, String> {
        let mut fields: BTreeMap<String, String> = req.query_pairs().into_iter().collect();
        let path = req.path.strip_prefix('/').unwrap_or(&req.path);
        let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
        if let Some(bucket) = percent_decode(bucket).filter(|b| !b.is_empty()) {
            fields.insert("bucket".into(), bucket);
        }
        if let Some(key) = percent_decode(key).filter(|k| !k.is_empty()) {
            fields.insert("key".into(), key);
        }
        fields
    }

    pub async fn handle(&self, req: FakeRequest) -> Disposition {
        if req.path.starts_with("/__twice") {
            let now_ms = self.core.clock.now_ms();
            let response = self.core.control(&req, |inner, body| seed_from_json(inner, body, now_ms));
            return Disposition::Respond(response);
        }
        let is_write = matches!(req.method.as_str(), "PUT" | "DELETE" | "POST");
        let ctx = self.core.begin(&req, Self::fields, is_write);
        let _abandoned = self.core.watch(&ctx);
        if let Some(done) = self.core.intercept(&ctx) {
            return done;
        }
        let outcome = match route(&req) {
            Ok(op) => self.execute(&ctx, &req, op).await,
            Err(e) => Outcome::of(e.response(&req.method)),
        };
        self.core.conclude(&ctx, outcome).await
    }

    async fn execute(&self, ctx: &Ctx, req: &FakeRequest, op: Op) -> Outcome {
        let method = req.method.as_str();
        let write = |prepared: Result<(String, Commit<FilesState>), S3Error>| async move {
            match prepared {
                Ok((fingerprint, commit)) => self.core.write(ctx, fingerprint, commit).await,
                Err(e) => Outcome::of(e.response(method)),
            }
        };
        match op {
            Op::ListBuckets => self.core.read(ctx, |inner, _| list_buckets(inner)).await,
            Op::HeadBucket { bucket } => {
                self.core
                    .read(ctx, |inner, _| {
                        if inner.state.buckets.contains_key(&bucket) {
                            empty(200).with_header("x-amz-bucket-region", "us-east-1")
                        } else {
                            no_such_bucket(&bucket).response("HEAD")
                        }
                    })
                    .await
            }
            Op::ListObjects { bucket } => match ListQuery::parse(req) {
                Ok(query) => {
                    self.core.read(ctx, |inner, until| list_objects(inner, &bucket, &query, until)).await
                }
                Err(e) => Outcome::of(e.response(method)),
            },
            Op::GetObject { bucket, key } => {
                let get = GetRequest::parse(req);
                self.core.read(ctx, |inner, until| get_object(inner, &bucket, &key, &get, until)).await
            }
            Op::CreateBucket { bucket } => write(prepare_create_bucket(req, bucket)).await,
            Op::DeleteBucket { bucket } => write(Ok(prepare_delete_bucket(req, bucket))).await,
            Op::PutObject { bucket, key } => write(self.prepare_put(req, bucket, key)).await,
            Op::DeleteObject { bucket, key } => write(self.prepare_delete(req, bucket, key)).await,
            Op::DeleteObjects { bucket } => write(self.prepare_delete_objects(req, bucket)).await,
        }
    }

    /// Checks that the bucket exists and, for a conditional write while conditional writes
    /// are on, marks the key as having one in flight (409 if another already is).
    fn admit_write(
        &self,
        bucket: &str,
        key: &str,
        conditional: bool,
    ) -> Result<(bool, Option<InFlight>), S3Error> {
        let mut inner = self.core.lock();
        if !inner.state.buckets.contains_key(bucket) {
            return Err(no_such_bucket(bucket));
        }
        let enforce = inner.contract.conditional_writes;
        if !(conditional && enforce) {
            return Ok((enforce, None));
        }
        let id = object_id(bucket, key);
        if inner.state.conditional.contains_key(&id) {
            return Err(S3Error::new(
                409,
                "ConditionalRequestConflict",
                "The conditional request cannot succeed due to a conflicting operation against this resource.",
            ));
        }
        let token = self.claims.fetch_add(1, Ordering::Relaxed);
        inner.state.conditional.insert(id.clone(), token);
        Ok((enforce, Some(InFlight { core: Arc::clone(&self.core), id, token, armed: true })))
    }

    fn prepare_put(
        &self,
        req: &FakeRequest,
        bucket: String,
        key: String,
    ) -> Result<(String, Commit<FilesState>), S3Error> {
        if req.headers.contains_key("x-amz-copy-source") {
            return Err(not_implemented("CopyObject (x-amz-copy-source)"));
        }
        // Without a Content-Length (HTTP chunked transfer), S3 takes only an aws-chunked body
        // that says its decoded length, as the SDKs send over TLS.
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
        let payload = read_payload(req)?;
        let headers = stored_headers(req)?;
        let conditions = Conditions::of(req, true)?;
        let digest = body::md5(&payload.bytes);
        let etag = format!("\"{}\"", body::hex(&digest));
        let fingerprint = format!("PUT {} {etag} {conditions:?}", req.path);
        let (enforce, in_flight) = self.admit_write(&bucket, &key, conditions.any())?;
        let put = Put {
            bucket,
            key,
            crc32: body::crc32_base64(&payload.bytes),
            body: payload.bytes,
            etag,
            headers,
            conditions,
            enforce,
            echo: payload.checksum,
        };
        let commit: Commit<FilesState> = Box::new(move |inner: &mut Inner<FilesState>, mode, stamp| {
            if let Some(in_flight) = in_flight {
                in_flight.end(&mut inner.state);
            }
            put_object(inner, mode, stamp, put)
        });
        Ok((fingerprint, commit))
    }

    fn prepare_delete(
        &self,
        req: &FakeRequest,
        bucket: String,
        key: String,
    ) -> Result<(String, Commit<FilesState>), S3Error> {
        let conditions = Conditions::of(req, false)?;
        let fingerprint = format!("DELETE {} {conditions:?}", req.path);
        let (enforce, in_flight) = self.admit_write(&bucket, &key, conditions.any())?;
        let commit: Commit<FilesState> = Box::new(move |inner: &mut Inner<FilesState>, mode, stamp| {
            if let Some(in_flight) = in_flight {
                in_flight.end(&mut inner.state);
            }
            delete_object(inner, mode, stamp, &bucket, &key, &conditions, enforce)
        });
        Ok((fingerprint, commit))
    }

    fn prepare_delete_objects(
        &self,
        req: &FakeRequest,
        bucket: String,
    ) -> Result<(String, Commit<FilesState>), S3Error> {
        let has_checksum = body::CHECKSUMS
            .iter()
            .any(|(algo, _)| req.headers.contains_key(format!("x-amz-checksum-{algo}").as_str()));
        if !req.headers.contains_key("content-md5") && !has_checksum {
            return Err(S3Error::new(
                400,
                "InvalidRequest",
                "Missing required header for this request: Content-MD5 OR x-amz-checksum-*",
            ));
        }
        let payload = read_payload(req)?;
        let request = xml::parse_delete(&payload.bytes)?;
        if !self.core.lock().state.buckets.contains_key(&bucket) {
            return Err(no_such_bucket(&bucket));
        }
        let fingerprint = format!("POST {}?delete {}", req.path, body::hex(&body::md5(&payload.bytes)));
        let commit: Commit<FilesState> = Box::new(move |inner: &mut Inner<FilesState>, mode, stamp| {
            delete_objects(inner, mode, stamp, &bucket, &request)
        });
        Ok((fingerprint, commit))
    }
}

/// A conditional write's claim on its key, from its arrival to its commit. The commit ends
/// it under the service's lock; if the request is cancelled before (its caller gone), the
/// drop ends it.
struct InFlight {
    core: Arc<ServiceCore<FilesState>>,
    id: String,
    token: u64,
    armed: bool,
}

impl InFlight {
    fn end(mut self, state: &mut FilesState) {
        release(state, &self.id, self.token);
        self.armed = false;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // Never reached with the lock held: the commit ends the claim itself (`end`), and a
        // commit step is only dropped unrun outside the lock.
        if self.armed {
            release(&mut self.core.lock().state, &self.id, self.token);
        }
    }
}

fn release(state: &mut FilesState, id: &str, token: u64) {
    if state.conditional.get(id) == Some(&token) {
        state.conditional.remove(id);
    }
}

fn object_id(bucket: &str, key: &str) -> String {
    format!("{bucket}/{key}")
}

/// What a request asks for.
#[derive(Debug)]
enum Op {
    ListBuckets,
    CreateBucket { bucket: String },
    HeadBucket { bucket: String },
    ListObjects { bucket: String },
    DeleteBucket { bucket: String },
    DeleteObjects { bucket: String },
    PutObject { bucket: String, key: String },
    GetObject { bucket: String, key: String },
    DeleteObject { bucket: String, key: String },
}

fn route(req: &FakeRequest) -> Result<Op, S3Error> {
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
    match method {
        "PUT" => Ok(Op::PutObject { bucket, key }),
        "GET" | "HEAD" => Ok(Op::GetObject { bucket, key }),
        "DELETE" => Ok(Op::DeleteObject { bucket, key }),
        _ => Err(method_not_allowed(method, "OBJECT")),
    }
}

fn method_not_allowed(method: &str, resource: &str) -> S3Error {
    S3Error::new(405, "MethodNotAllowed", "The specified method is not allowed against this resource.")
        .with("Method", method)
        .with("ResourceType", resource)
}

/// S3 answers these 501; the fake answers 400, since without a fault it never answers 5xx
/// (a 5xx invites retries, and a harness reads it as the service failing).
fn not_implemented(what: &str) -> S3Error {
    S3Error::new(400, "NotImplemented", format!("The files fake does not implement {what}."))
}

fn no_such_bucket(bucket: &str) -> S3Error {
    S3Error::new(404, "NoSuchBucket", "The specified bucket does not exist").with("BucketName", bucket)
}

fn no_such_key(key: &str) -> S3Error {
    S3Error::new(404, "NoSuchKey", "The specified key does not exist.").with("Key", key)
}

fn precondition_failed(condition: &str) -> S3Error {
    S3Error::new(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
        .with("Condition", condition)
}

fn invalid_argument(name: &str, value: &str, message: &str) -> S3Error {
    S3Error::new(400, "InvalidArgument", message).with("ArgumentName", name).with("ArgumentValue", value)
}

fn empty(status: u16) -> FakeResponse {
    FakeResponse { status, headers: Vec::new(), body: Bytes::new() }
}

/// The headers every answer carries; an error document gets the request's id as well.
fn stamp(response: &mut FakeResponse, request_id: &str) {
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

/// A PUT's body once framing is removed, and the checksum the client sent with it.
struct Payload {
    bytes: Bytes,
    /// `(x-amz-checksum-ALGO, value)`, echoed back as S3 does.
    checksum: Option<(String, String)>,
}

/// Reads the body of a PUT or POST: decodes `aws-chunked`, checks the decoded length, the
/// trailers, `Content-MD5`, `x-amz-content-sha256` and the `x-amz-checksum-*` value.
fn read_payload(req: &FakeRequest) -> Result<Payload, S3Error> {
    let content_sha = header(req, "x-amz-content-sha256")?;
    let encodings = header(req, "content-encoding")?.unwrap_or_default().to_ascii_lowercase();
    let streaming = content_sha.as_deref().is_some_and(|v| v.starts_with("STREAMING-"));
    let chunked = streaming || encodings.split(',').any(|e| e.trim() == "aws-chunked");
    let incomplete = || {
        S3Error::new(
            400,
            "IncompleteBody",
            "You did not provide the number of bytes specified by the Content-Length HTTP header",
        )
    };
    let malformed_trailer = || {
        S3Error::new(
            400,
            "MalformedTrailerError",
            "The request contained trailing data that was not well-formed or did not conform to our published schema.",
        )
    };
    let (bytes, trailers) = if chunked {
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
        (Bytes::from(decoded.payload), decoded.trailers)
    } else {
        match content_sha.as_deref() {
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
        (req.body.clone(), Vec::new())
    };
    if let Some(md5) = header(req, "content-md5")? {
        let given = body::unbase64(&md5).filter(|d| d.len() == 16).ok_or_else(|| {
            S3Error::new(400, "InvalidDigest", "The Content-MD5 you specified was invalid.")
                .with("Content-MD5", &md5)
        })?;
        if given != body::md5(&bytes) {
            return Err(S3Error::new(
                400,
                "BadDigest",
                "The Content-MD5 you specified did not match what we received.",
            )
            .with("ExpectedDigest", md5)
            .with("CalculatedDigest", body::base64(&body::md5(&bytes))));
        }
    }
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
        match body::check_checksum(algorithm, value, &bytes) {
            Ok(Verdict::Matches | Verdict::Unchecked) => {}
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
    Ok(Payload { bytes, checksum: checksums.into_iter().next() })
}

/// A header's value as text; a header that is present but not text is a 400, since S3
/// could not read it either.
fn header(req: &FakeRequest, name: &str) -> Result<Option<String>, S3Error> {
    match req.headers.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(|s| Some(s.to_string())).map_err(|_| {
            S3Error::new(400, "InvalidArgument", format!("The {name} header is not valid text."))
                .with("ArgumentName", name)
        }),
    }
}

/// The headers a PUT stores with its object.
fn stored_headers(req: &FakeRequest) -> Result<Vec<(String, String)>, S3Error> {
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

/// The conditions of a write.
#[derive(Debug, Clone, Default)]
struct Conditions {
    /// `If-None-Match: *`: only if the key holds no object.
    if_none_match: bool,
    /// `If-Match`: only if the current object's ETag is one of these (bare) tags.
    if_match: Option<Vec<String>>,
    /// `If-Match` as recorded in the ledger: quoted tags, or `*`.
    if_match_text: Option<String>,
}

impl Conditions {
    fn of(req: &FakeRequest, none_match_allowed: bool) -> Result<Conditions, S3Error> {
        let mut conditions = Conditions::default();
        if none_match_allowed && let Some(value) = header(req, "if-none-match")? {
            // S3 takes only `*` on a write.
            if value.trim() != "*" {
                return Err(S3Error::new(
                    400,
                    "NotImplemented",
                    "A header you provided implies functionality that is not implemented",
                )
                .with("Header", "If-None-Match"));
            }
            conditions.if_none_match = true;
        }
        if let Some(value) = header(req, "if-match")? {
            let tags = etags(&value);
            if tags.is_empty() {
                return Err(invalid_argument("If-Match", &value, "If-Match needs an entity tag."));
            }
            let text: Vec<String> =
                tags.iter().map(|t| if t == "*" { t.clone() } else { format!("\"{t}\"") }).collect();
            conditions.if_match_text = Some(text.join(", "));
            conditions.if_match = Some(tags);
        }
        Ok(conditions)
    }

    fn any(&self) -> bool {
        self.if_none_match || self.if_match.is_some()
    }

    /// Whether a write may replace `current` (an ETag, or nothing): 412 or 404 if not.
    fn check(&self, key: &str, current: Option<&str>) -> Result<(), S3Error> {
        if self.if_none_match && current.is_some() {
            return Err(precondition_failed("If-None-Match"));
        }
        if let Some(tags) = &self.if_match {
            match current {
                None => return Err(no_such_key(key)),
                Some(etag) if !etag_matches(tags, etag) => return Err(precondition_failed("If-Match")),
                Some(_) => {}
            }
        }
        Ok(())
    }
}

/// A PUT ready to commit.
struct Put {
    bucket: String,
    key: String,
    body: Bytes,
    etag: String,
    crc32: String,
    headers: Vec<(String, String)>,
    conditions: Conditions,
    /// Whether conditions are evaluated (the contract's `conditional_writes`).
    enforce: bool,
    echo: Option<(String, String)>,
}

fn put_object(inner: &mut Inner<FilesState>, mode: Mode, stamp: &Stamp, put: Put) -> FakeResponse {
    let Some(bucket) = inner.state.buckets.get_mut(&put.bucket) else {
        return no_such_bucket(&put.bucket).response("PUT");
    };
    let mut ok =
        empty(200).with_header("etag", &put.etag).with_header("x-amz-server-side-encryption", "AES256");
    if let Some((name, value)) = &put.echo {
        ok = ok.with_header(name, value).with_header("x-amz-checksum-type", "FULL_OBJECT");
    }
    if mode == Mode::Pretend {
        return ok;
    }
    let replaced = bucket.current(&put.key).map(|o| o.etag.clone());
    if put.enforce
        && let Err(e) = put.conditions.check(&put.key, replaced.as_deref())
    {
        return e.response("PUT");
    }
    let object = Object {
        body: put.body,
        etag: put.etag,
        crc32: put.crc32,
        modified_ms: stamp.now_ms,
        headers: put.headers,
    };
    let params = json!({
        "bucket": put.bucket,
        "key": put.key,
        "body": String::from_utf8_lossy(&object.body),
        "etag": object.etag,
        "size": object.body.len(),
        "if_match": put.conditions.if_match_text,
        "if_none_match": put.conditions.if_none_match,
        "replaced": replaced,
    });
    bucket.set(&put.key, stamp.now_ms, Some(Arc::new(object)));
    inner.ledger.record(Effect {
        seq: 0,
        at_ms: stamp.now_ms,
        kind: "object.put".into(),
        object_id: object_id(&put.bucket, &put.key),
        params,
        idempotency_key: stamp.key.clone(),
        fencing_token: None,
        request_id: stamp.request_id.clone(),
    });
    ok
}

fn delete_object(
    inner: &mut Inner<FilesState>,
    mode: Mode,
    stamp: &Stamp,
    bucket_name: &str,
    key: &str,
    conditions: &Conditions,
    enforce: bool,
) -> FakeResponse {
    let Some(bucket) = inner.state.buckets.get_mut(bucket_name) else {
        return no_such_bucket(bucket_name).response("DELETE");
    };
    if mode == Mode::Pretend {
        return empty(204);
    }
    let replaced = bucket.current(key).map(|o| o.etag.clone());
    if enforce && let Err(e) = conditions.check(key, replaced.as_deref()) {
        return e.response("DELETE");
    }
    if let Some(etag) = replaced {
        bucket.set(key, stamp.now_ms, None);
        record_deleted(inner, stamp, bucket_name, key, &etag, conditions.if_match_text.as_deref());
    }
    empty(204)
}

fn record_deleted(
    inner: &mut Inner<FilesState>,
    stamp: &Stamp,
    bucket: &str,
    key: &str,
    etag: &str,
    if_match: Option<&str>,
) {
    inner.ledger.record(Effect {
        seq: 0,
        at_ms: stamp.now_ms,
        kind: "object.deleted".into(),
        object_id: object_id(bucket, key),
        params: json!({"bucket": bucket, "key": key, "replaced": etag, "if_match": if_match}),
        idempotency_key: stamp.key.clone(),
        fencing_token: None,
        request_id: stamp.request_id.clone(),
    });
}

fn delete_objects(
    inner: &mut Inner<FilesState>,
    mode: Mode,
    stamp: &Stamp,
    bucket_name: &str,
    request: &xml::DeleteRequest,
) -> FakeResponse {
    if !inner.state.buckets.contains_key(bucket_name) {
        return no_such_bucket(bucket_name).response("POST");
    }
    let mut doc = Document::new("DeleteResult");
    for key in &request.keys {
        if mode == Mode::Apply {
            let replaced = inner.state.buckets.get_mut(bucket_name).and_then(|bucket| {
                let etag = bucket.current(key).map(|o| o.etag.clone())?;
                bucket.set(key, stamp.now_ms, None);
                Some(etag)
            });
            if let Some(etag) = replaced {
                record_deleted(inner, stamp, bucket_name, key, &etag, None);
            }
        }
        // S3 reports a key that held nothing as deleted too.
        if !request.quiet {
            doc.open("Deleted").leaf("Key", key).close("Deleted");
        }
    }
    xml_response(200, doc)
}

fn xml_response(status: u16, doc: Document) -> FakeResponse {
    FakeResponse { status, headers: vec![xml::content_type_xml()], body: doc.finish() }
}

fn prepare_create_bucket(req: &FakeRequest, bucket: String) -> Result<(String, Commit<FilesState>), S3Error> {
    if !req.body.iter().all(u8::is_ascii_whitespace) {
        let root = xml::root_of(&req.body)?;
        if root != "CreateBucketConfiguration" {
            return Err(S3Error::new(
                400,
                "MalformedXML",
                "The XML you provided was not well-formed or did not validate against our published schema",
            ));
        }
    }
    let fingerprint = format!("PUT /{bucket}");
    let commit: Commit<FilesState> = Box::new(move |inner: &mut Inner<FilesState>, mode, stamp| {
        if mode == Mode::Apply {
            inner
                .state
                .buckets
                .entry(bucket.clone())
                .or_insert_with(|| Bucket { created_ms: stamp.now_ms, keys: BTreeMap::new() });
        }
        // us-east-1 answers 200 to its owner's second create of a bucket.
        empty(200).with_header("location", &format!("/{bucket}"))
    });
    Ok((fingerprint, commit))
}

fn prepare_delete_bucket(req: &FakeRequest, bucket: String) -> (String, Commit<FilesState>) {
    let fingerprint = format!("DELETE {}", req.path);
    let commit: Commit<FilesState> =
        Box::new(move |inner: &mut Inner<FilesState>, mode, _| match inner.state.buckets.get(&bucket) {
            None => no_such_bucket(&bucket).response("DELETE"),
            Some(b) if b.has_objects() => {
                S3Error::new(409, "BucketNotEmpty", "The bucket you tried to delete is not empty")
                    .with("BucketName", bucket)
                    .response("DELETE")
            }
            Some(_) => {
                if mode == Mode::Apply {
                    inner.state.buckets.remove(&bucket);
                }
                empty(204)
            }
        });
    (fingerprint, commit)
}

fn list_buckets(inner: &mut Inner<FilesState>) -> FakeResponse {
    let mut doc = Document::new("ListAllMyBucketsResult");
    doc.open("Owner").leaf("ID", OWNER_ID).leaf("DisplayName", "twice").close("Owner").open("Buckets");
    for (name, bucket) in &inner.state.buckets {
        doc.open("Bucket")
            .leaf("Name", name)
            .leaf("CreationDate", &iso_date(bucket.created_ms))
            .close("Bucket");
    }
    doc.close("Buckets");
    xml_response(200, doc)
}

const OWNER_ID: &str = "75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a";

/// What a GET or HEAD asks besides the key.
#[derive(Debug, Default)]
struct GetRequest {
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
    fn parse(req: &FakeRequest) -> GetRequest {
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

fn get_object(
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

/// `GET /{bucket}`: ListObjects (V1) or, with `list-type=2`, ListObjectsV2.
#[derive(Debug, Default)]
struct ListQuery {
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
    fn parse(req: &FakeRequest) -> Result<ListQuery, S3Error> {
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

fn list_objects(
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

fn seed_bucket(state: &mut FilesState, name: &str, now_ms: u64) -> Result<(), String> {
    check_bucket_name(name)?;
    state
        .buckets
        .entry(name.to_string())
        .or_insert_with(|| Bucket { created_ms: now_ms, keys: BTreeMap::new() });
    Ok(())
}

fn seed_object(
    state: &mut FilesState,
    bucket: &str,
    key: &str,
    body: &[u8],
    content_type: Option<String>,
    now_ms: u64,
) -> Result<String, String> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(format!(
            "an object key must be 1 to {KEY_BYTES_MAX} bytes long, \"{key}\" is {}",
            key.len()
        ));
    }
    seed_bucket(state, bucket, now_ms)?;
    let etag = format!("\"{}\"", body::hex(&body::md5(body)));
    let object = Object {
        body: Bytes::copy_from_slice(body),
        etag: etag.clone(),
        crc32: body::crc32_base64(body),
        modified_ms: now_ms,
        headers: content_type.map(|t| vec![("content-type".to_string(), t)]).unwrap_or_default(),
    };
    if let Some(b) = state.buckets.get_mut(bucket) {
        // Service time 0: a seeded object was there before anything happened, so every
        // view, however stale, sees it.
        b.keys.insert(key.to_string(), vec![Version { at_ms: 0, object: Some(Arc::new(object)) }]);
    }
    Ok(etag)
}

fn seed_from_json(inner: &mut Inner<FilesState>, body: &[u8], now_ms: u64) -> Result<Value, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Seed {
        #[serde(default)]
        buckets: Vec<String>,
        #[serde(default)]
        objects: Vec<SeedObject>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SeedObject {
        bucket: String,
        key: String,
        body: String,
        #[serde(default)]
        content_type: Option<String>,
    }
    let seed: Seed = serde_json::from_slice(body).map_err(|e| {
        format!(
            "expected {{\"buckets\": [\"reports\"], \"objects\": [{{\"bucket\": \"reports\", \"key\": \"q3.csv\", \"body\": \"text\"}}]}}: {e}"
        )
    })?;
    let mut buckets = Vec::new();
    for name in seed.buckets {
        seed_bucket(&mut inner.state, &name, now_ms)?;
        buckets.push(name);
    }
    let mut objects = Vec::new();
    for o in seed.objects {
        let etag =
            seed_object(&mut inner.state, &o.bucket, &o.key, o.body.as_bytes(), o.content_type, now_ms)?;
        objects.push(json!({"bucket": o.bucket, "key": o.key, "etag": etag, "size": o.body.len()}));
    }
    Ok(json!({"buckets": buckets, "objects": objects}))
}
