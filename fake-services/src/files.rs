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
//! Multipart uploads: CreateMultipartUpload (`POST /{bucket}/{key}?uploads`), UploadPart
//! (`PUT ?partNumber=N&uploadId=U`), CompleteMultipartUpload (`POST ?uploadId=U`, conditional
//! like a PUT), AbortMultipartUpload (`DELETE ?uploadId=U`) and ListParts (`GET ?uploadId=U`);
//! a multipart object's ETag is `"<md5 of the parts' md5s>-<count>"`.
//!
//! Effects: `object.put` for every PUT that stores an object and every completed multipart
//! upload, `object.deleted` for every delete that removed one (see `docs/faults.md`). Buckets,
//! seeded objects, and uploads or parts before their Complete are not effects.

//! The module is split by concept: this file holds the fake itself ([`Files`]: construction,
//! seeding, the fields rules match, and the dispatch of each operation through the shared
//! pipeline); `store.rs` the buckets and versioned keys; `route.rs` which operation a request
//! is; one file per operation group (`buckets.rs`, `get.rs`, `list.rs`, `put.rs`,
//! `delete.rs`, `multipart.rs`); `conditional.rs` the conditions of writes and the 409 claim; `payload.rs`
//! bodies, checksums and stored headers; `answer.rs` the common errors and the stamp;
//! `seed.rs` seeding; and below them `body.rs`, `http.rs` and `xml.rs`, the wire formats.

mod answer;
mod body;
mod buckets;
mod conditional;
mod delete;
mod get;
pub(crate) mod http;
mod list;
mod multipart;
mod payload;
mod put;
mod route;
mod seed;
mod store;
pub(crate) mod xml;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::clock::ServiceClock;
use crate::core::{Commit, Ctx, Outcome, ServiceCore, Shape};
use crate::wire::{Disposition, FakeRequest};
use vocabulary::contract::Contract;

pub use http::{KEY_BYTES_MAX, check_bucket_name};
pub use payload::METADATA_BYTES_MAX;
pub use store::FilesState;
pub use xml::{S3Error, error_body};

use answer::{access_denied, empty, no_such_bucket, stamp};
use buckets::{list_buckets, prepare_create_bucket, prepare_delete_bucket};
use get::{GetRequest, get_object};
use http::percent_decode;
use list::{ListQuery, list_objects};
use multipart::{PartsQuery, Target, list_parts};
use route::{Op, route};
use seed::{seed_bucket, seed_from_json, seed_object, seed_read_only_bucket};

/// The service's name in rules, ledgers and URLs files.
pub const NAME: &str = "files";

/// Largest request body the files fake reads; larger is 413 `EntityTooLarge`. More than the
/// other fakes' 1 MiB because S3 clients send whole parts: boto3 switches to multipart at
/// 8 MiB and sends 8 MiB parts, and S3 refuses parts but the last under 5 MiB.
pub const BODY_BYTES_MAX: usize = 16 * 1024 * 1024;

/// What a refused write asked for, as the `object.put` it would have made names it: a PUT's
/// `bucket`, `key` and `body` (UTF-8, lossy), a Complete's `bucket` and `key`. Other requests
/// are no action's.
fn refused_params(req: &FakeRequest) -> Option<serde_json::Value> {
    match route(req).ok()? {
        Op::PutObject { bucket, key } => {
            let body = payload::read_payload(req).ok()?.bytes;
            Some(serde_json::json!({"bucket": bucket, "key": key, "body": String::from_utf8_lossy(&body)}))
        }
        Op::CompleteMultipartUpload { bucket, key, .. } => {
            Some(serde_json::json!({"bucket": bucket, "key": key}))
        }
        _ => None,
    }
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
        let core = ServiceCore::new(NAME, clock, seed, Contract::files_default(), shape);
        Files { core: Arc::new(core.reading_refusals(refused_params)), claims: Arc::new(AtomicU64::new(0)) }
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

    /// Makes `name` a bucket the caller may read and not write (creating it if needed), as a
    /// bucket policy that denies `s3:PutObject` and `s3:DeleteObject` does: every request that
    /// would store, delete or upload an object in it is 403 `AccessDenied`.
    pub fn seed_read_only_bucket(&self, name: &str) -> Result<(), String> {
        let now_ms = self.core.clock.now_ms();
        seed_read_only_bucket(&mut self.core.lock().state, name, now_ms)
    }

    /// Stores an object as if it had always been there (no effect; stale reads see it too),
    /// creating its bucket if needed; returns its quoted ETag.
    pub fn seed_object(&self, bucket: &str, key: &str, body: &[u8]) -> Result<String, String> {
        let now_ms = self.core.clock.now_ms();
        seed_object(&mut self.core.lock().state, bucket, key, body, None, now_ms)
    }

    /// Fields a rule can match: `bucket`, `key` (both decoded), the query parameters, and
    /// `operation`, S3's name for what the request asks (`PutObject`, `UploadPart`,
    /// `CompleteMultipartUpload`, ...), which tells apart requests that share a method and a path.
    pub fn fields(req: &FakeRequest) -> BTreeMap<String, String> {
        let mut fields: BTreeMap<String, String> = req.query_pairs().into_iter().collect();
        if let Ok(op) = route(req) {
            fields.insert("operation".into(), op.name(&req.method).into());
        }
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
        if let Some(done) = self.core.intercept(&ctx, &req) {
            return done;
        }
        let outcome = match route(&req) {
            Ok(op) => self.execute(&ctx, &req, op).await,
            Err(e) => Outcome::of(e.response(&req.method)),
        };
        self.core.conclude(&ctx, &req, outcome).await
    }

    async fn execute(&self, ctx: &Ctx, req: &FakeRequest, op: Op) -> Outcome {
        let method = req.method.as_str();
        // A bucket policy is judged before anything else about the request, as S3 does.
        if let Some(bucket) = op.object_write()
            && self.core.lock().state.read_only.contains(bucket)
        {
            return Outcome::of(access_denied().response(method));
        }
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
            Op::CreateMultipartUpload { bucket, key } => {
                write(self.prepare_create_upload(req, bucket, key)).await
            }
            Op::UploadPart { bucket, key, upload_id, part_number } => {
                write(self.prepare_upload_part(req, Target { bucket, key, upload_id }, part_number)).await
            }
            Op::CompleteMultipartUpload { bucket, key, upload_id } => {
                write(self.prepare_complete(req, Target { bucket, key, upload_id })).await
            }
            Op::AbortMultipartUpload { bucket, key, upload_id } => {
                write(self.prepare_abort(req, Target { bucket, key, upload_id })).await
            }
            Op::ListParts { bucket, key, upload_id } => match PartsQuery::parse(req) {
                Ok(query) => {
                    let target = Target { bucket, key, upload_id };
                    self.core.read(ctx, |inner, until| list_parts(inner, &target, &query, until)).await
                }
                Err(e) => Outcome::of(e.response(method)),
            },
        }
    }
}
