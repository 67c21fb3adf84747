//! PutObject: a PUT prepared outside the lock (body, headers, conditions, the key's claim),
//! then committed: the object stored as the key's new version and an `object.put` effect
//! recorded, with the request's user metadata (`x-amz-meta-*`) in its params.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::json;

use super::Files;
use super::answer::{empty, no_such_bucket, not_implemented};
use super::body;
use super::conditional::Conditions;
use super::payload::{read_payload, require_length, stored_headers, user_metadata};
use super::store::{FilesState, Object, object_id};
use super::xml::S3Error;
use crate::core::{Commit, Inner, Mode, Stamp};
use crate::wire::{FakeRequest, FakeResponse};
use vocabulary::Effect;

impl Files {
    pub(super) fn prepare_put(
        &self,
        req: &FakeRequest,
        bucket: String,
        key: String,
    ) -> Result<(String, Commit<FilesState>), S3Error> {
        if req.headers.contains_key("x-amz-copy-source") {
            return Err(not_implemented("CopyObject (x-amz-copy-source)"));
        }
        require_length(req)?;
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
    let metadata = user_metadata(&put.headers);
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
        "metadata": metadata,
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
