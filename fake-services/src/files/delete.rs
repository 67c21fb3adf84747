//! DeleteObject (conditional on `If-Match`) and DeleteObjects (`POST /{bucket}?delete`): each
//! key that held an object gets an `object.deleted` effect; a key that held nothing is
//! reported deleted too, as S3 does, with no effect.

use serde_json::json;

use super::Files;
use super::answer::{empty, no_such_bucket, xml_response};
use super::body;
use super::conditional::Conditions;
use super::payload::read_payload;
use super::store::{FilesState, object_id};
use super::xml::{self, Document, S3Error};
use crate::core::{Commit, Inner, Mode, Stamp};
use crate::wire::{FakeRequest, FakeResponse};
use vocabulary::Effect;

impl Files {
    pub(super) fn prepare_delete(
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

    pub(super) fn prepare_delete_objects(
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
