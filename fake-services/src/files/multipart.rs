//! Multipart uploads: CreateMultipartUpload (`POST ?uploads`), UploadPart
//! (`PUT ?partNumber=N&uploadId=U`), CompleteMultipartUpload (`POST ?uploadId=U`),
//! AbortMultipartUpload (`DELETE ?uploadId=U`) and ListParts (`GET ?uploadId=U`).
//!
//! Each is a write (or, ListParts, a read) through the shared pipeline like PutObject, so every
//! fault lands on it the same way. Only Complete is an effect: the object appears then, as one
//! `object.put`, and the upload is gone; creating, uploading parts and aborting change no
//! object, so the ledger does not see them. A retried Complete after a lost answer meets no
//! upload (`NoSuchUpload`), as S3 documents ("the upload ID might be invalid, or the multipart
//! upload might have been aborted or completed"): the caller then holds an error for an
//! object that exists.
//!
//! Everything that depends on the upload's parts (their order, their tags, their sizes) is
//! decided at the commit under the service's lock, since parts may arrive or be replaced
//! between a Complete's arrival and its commit.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use serde_json::json;

use super::Files;
use super::answer::{empty, invalid_argument, no_such_bucket, not_implemented, xml_response};
use super::body;
use super::conditional::Conditions;
use super::http::iso_date;
use super::payload::{header, read_payload, require_length, stored_headers, user_metadata};
use super::store::{FilesState, Object, Part, Upload, object_id};
use super::xml::{self, CompletedPart, Document, S3Error};
use crate::core::{Commit, Inner, Mode, Stamp};
use crate::wire::{FakeRequest, FakeResponse};
use vocabulary::Effect;

/// S3's smallest part but the last: 5 MiB.
pub(crate) const PART_BYTES_MIN: usize = 5 * 1024 * 1024;

/// Uploads in progress the fake holds at once. S3 has no such limit; a fake that keeps every
/// part in memory needs one.
pub(crate) const UPLOADS_MAX: usize = 1_000;

/// Bytes the parts of all uploads in progress may hold together, for the same reason.
pub(crate) const UPLOAD_BYTES_MAX: usize = 1024 * 1024 * 1024;

/// ListParts answers at most this many parts per page, as S3 does.
const LIST_PARTS_MAX: usize = 1_000;

impl Files {
    pub(super) fn prepare_create_upload(
        &self,
        req: &FakeRequest,
        bucket: String,
        key: String,
    ) -> Result<(String, Commit<FilesState>), S3Error> {
        let headers = stored_headers(req)?;
        let checksum_algorithm = match header(req, "x-amz-checksum-algorithm")? {
            None => None,
            Some(algorithm) => {
                let upper = algorithm.trim().to_ascii_uppercase();
                if !body::CHECKSUMS.iter().any(|(name, _)| name.eq_ignore_ascii_case(&upper)) {
                    return Err(S3Error::new(
                        400,
                        "InvalidRequest",
                        "Checksum algorithm provided is unsupported. Please try again with any of the valid types: [CRC32, CRC32C, CRC64NVME, SHA1, SHA256]",
                    ));
                }
                Some(upper)
            }
        };
        if !self.core.lock().state.buckets.contains_key(&bucket) {
            return Err(no_such_bucket(&bucket));
        }
        let fingerprint = format!("POST {}?uploads {headers:?} {checksum_algorithm:?}", req.path);
        let commit: Commit<FilesState> = Box::new(move |inner: &mut Inner<FilesState>, mode, stamp| {
            create_upload(inner, mode, stamp, bucket, key, headers, checksum_algorithm)
        });
        Ok((fingerprint, commit))
    }

    pub(super) fn prepare_upload_part(
        &self,
        req: &FakeRequest,
        target: Target,
        part_number: u32,
    ) -> Result<(String, Commit<FilesState>), S3Error> {
        if req.headers.contains_key("x-amz-copy-source") {
            return Err(not_implemented("UploadPartCopy (x-amz-copy-source)"));
        }
        require_length(req)?;
        let payload = read_payload(req)?;
        if !self.core.lock().state.buckets.contains_key(&target.bucket) {
            return Err(no_such_bucket(&target.bucket));
        }
        let md5 = body::md5(&payload.bytes);
        let etag = format!("\"{}\"", body::hex(&md5));
        let fingerprint =
            format!("PUT {}?partNumber={part_number}&uploadId={} {etag}", req.path, target.upload_id);
        let part =
            Part { crc32: crc32fast::hash(&payload.bytes), body: payload.bytes, md5, etag, modified_ms: 0 };
        let echo = payload.checksum;
        let commit: Commit<FilesState> = Box::new(move |inner: &mut Inner<FilesState>, mode, stamp| {
            upload_part(inner, mode, stamp, &target, part_number, part, echo)
        });
        Ok((fingerprint, commit))
    }

    pub(super) fn prepare_complete(
        &self,
        req: &FakeRequest,
        target: Target,
    ) -> Result<(String, Commit<FilesState>), S3Error> {
        let payload = read_payload(req)?;
        let parts = xml::parse_complete(&payload.bytes)?;
        let conditions = Conditions::of(req, true)?;
        let host = header(req, "host")?.unwrap_or_else(|| "localhost".into());
        let location = format!("http://{host}{}", req.path);
        let fingerprint = format!(
            "POST {}?uploadId={} {} {conditions:?}",
            req.path,
            target.upload_id,
            body::hex(&body::md5(&payload.bytes))
        );
        let (enforce, in_flight) = self.admit_write(&target.bucket, &target.key, conditions.any())?;
        let complete = Complete { target, parts, conditions, enforce, location };
        let commit: Commit<FilesState> = Box::new(move |inner: &mut Inner<FilesState>, mode, stamp| {
            if let Some(in_flight) = in_flight {
                in_flight.end(&mut inner.state);
            }
            complete_upload(inner, mode, stamp, complete)
        });
        Ok((fingerprint, commit))
    }

    pub(super) fn prepare_abort(
        &self,
        req: &FakeRequest,
        target: Target,
    ) -> Result<(String, Commit<FilesState>), S3Error> {
        if !self.core.lock().state.buckets.contains_key(&target.bucket) {
            return Err(no_such_bucket(&target.bucket));
        }
        let fingerprint = format!("DELETE {}?uploadId={}", req.path, target.upload_id);
        let commit: Commit<FilesState> =
            Box::new(move |inner: &mut Inner<FilesState>, mode, _stamp| abort_upload(inner, mode, &target));
        Ok((fingerprint, commit))
    }
}

/// The upload a request names: its bucket, key and id.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub(super) bucket: String,
    pub(super) key: String,
    pub(super) upload_id: String,
}

/// ListParts' paging: `max-parts` and `part-number-marker`.
#[derive(Debug, Clone)]
pub(super) struct PartsQuery {
    max_parts: usize,
    marker: u32,
}

impl PartsQuery {
    pub(super) fn parse(req: &FakeRequest) -> Result<PartsQuery, S3Error> {
        let mut query = PartsQuery { max_parts: LIST_PARTS_MAX, marker: 0 };
        for (name, value) in req.query_pairs() {
            match name.as_str() {
                "max-parts" => {
                    let n = value.trim().parse::<usize>().map_err(|_| {
                        invalid_argument(
                            "max-parts",
                            &value,
                            "Provided max-parts not an integer or within integer range",
                        )
                    })?;
                    query.max_parts = n.min(LIST_PARTS_MAX);
                }
                "part-number-marker" => {
                    query.marker = value.trim().parse::<u32>().map_err(|_| {
                        invalid_argument(
                            "part-number-marker",
                            &value,
                            "Provided part-number-marker not an integer or within integer range",
                        )
                    })?;
                }
                _ => {}
            }
        }
        Ok(query)
    }
}

/// S3's answer to an upload id it does not hold for this bucket and key.
fn no_such_upload(upload_id: &str) -> S3Error {
    S3Error::new(
        404,
        "NoSuchUpload",
        "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
    )
    .with("UploadId", upload_id)
}

/// The upload `target` names, if it is one of this bucket and key.
fn upload_of<'a>(state: &'a mut FilesState, target: &Target) -> Option<&'a mut Upload> {
    state.uploads.get_mut(&target.upload_id).filter(|u| u.bucket == target.bucket && u.key == target.key)
}

fn create_upload(
    inner: &mut Inner<FilesState>,
    mode: Mode,
    stamp: &Stamp,
    bucket: String,
    key: String,
    headers: Vec<(String, String)>,
    checksum_algorithm: Option<String>,
) -> FakeResponse {
    if !inner.state.buckets.contains_key(&bucket) {
        return no_such_bucket(&bucket).response("POST");
    }
    if mode == Mode::Apply && inner.state.uploads.len() >= UPLOADS_MAX {
        return S3Error::new(
            400,
            "InvalidRequest",
            format!("The files fake holds at most {UPLOADS_MAX} multipart uploads in progress; complete or abort one."),
        )
        .response("POST");
    }
    let upload_id = inner.new_id("", 48);
    let mut doc = Document::new("InitiateMultipartUploadResult");
    doc.leaf("Bucket", &bucket).leaf("Key", &key).leaf("UploadId", &upload_id);
    let mut ok = xml_response(200, doc).with_header("x-amz-server-side-encryption", "AES256");
    if let Some(algorithm) = &checksum_algorithm {
        ok = ok
            .with_header("x-amz-checksum-algorithm", algorithm)
            .with_header("x-amz-checksum-type", "COMPOSITE");
    }
    if mode == Mode::Apply {
        let upload = Upload {
            bucket,
            key,
            initiated_ms: stamp.now_ms,
            headers,
            checksum_algorithm,
            parts: Default::default(),
        };
        inner.state.uploads.insert(upload_id, upload);
    }
    ok
}

fn upload_part(
    inner: &mut Inner<FilesState>,
    mode: Mode,
    stamp: &Stamp,
    target: &Target,
    part_number: u32,
    mut part: Part,
    echo: Option<(String, String)>,
) -> FakeResponse {
    let held = inner.state.upload_bytes;
    let Some(upload) = upload_of(&mut inner.state, target) else {
        return no_such_upload(&target.upload_id).response("PUT");
    };
    let mut ok =
        empty(200).with_header("etag", &part.etag).with_header("x-amz-server-side-encryption", "AES256");
    if let Some((name, value)) = &echo {
        ok = ok.with_header(name, value);
    }
    if mode == Mode::Pretend {
        return ok;
    }
    let replaced = upload.parts.get(&part_number).map_or(0, |p| p.body.len());
    let held = held.saturating_sub(replaced) + part.body.len();
    if held > UPLOAD_BYTES_MAX {
        return S3Error::new(
            400,
            "EntityTooLarge",
            format!("The files fake holds at most {UPLOAD_BYTES_MAX} bytes of parts in progress; complete or abort an upload."),
        )
        .response("PUT");
    }
    part.modified_ms = stamp.now_ms;
    upload.parts.insert(part_number, part);
    inner.state.upload_bytes = held;
    ok
}

/// A Complete ready to commit.
struct Complete {
    target: Target,
    parts: Vec<CompletedPart>,
    conditions: Conditions,
    /// Whether conditions are evaluated (the contract's `conditional_writes`).
    enforce: bool,
    location: String,
}

/// What the listed parts make: the object's ETag (`"<md5 of the parts' md5s>-<count>"`) and,
/// when the upload asked for CRC32, its composite checksum (`<crc32 of the parts' crc32s>-N`).
struct Assembled {
    etag: String,
    crc32_composite: Option<String>,
    size: usize,
}

/// Checks the listed parts against the upload, in S3's order of complaints.
fn assemble(upload: &Upload, listed: &[CompletedPart], upload_id: &str) -> Result<Assembled, S3Error> {
    let invalid_part = |p: &CompletedPart| {
        S3Error::new(
            400,
            "InvalidPart",
            "One or more of the specified parts could not be found.  The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.",
        )
        .with("UploadId", upload_id)
        .with("PartNumber", p.part_number.to_string())
        .with("ETag", p.etag.clone())
    };
    if listed.windows(2).any(|w| w[0].part_number >= w[1].part_number) {
        return Err(S3Error::new(
            400,
            "InvalidPartOrder",
            "The list of parts was not in ascending order. Parts must be ordered by part number.",
        )
        .with("UploadId", upload_id));
    }
    let mut md5s = Vec::with_capacity(listed.len() * 16);
    let mut crcs = Vec::with_capacity(listed.len() * 4);
    let mut size = 0;
    for (i, wanted) in listed.iter().enumerate() {
        let Some(part) = upload.parts.get(&wanted.part_number) else { return Err(invalid_part(wanted)) };
        if wanted.etag.trim_matches('"') != part.etag.trim_matches('"') {
            return Err(invalid_part(wanted));
        }
        if let Some(crc) = &wanted.checksum_crc32
            && body::unbase64(crc).as_deref() != Some(&part.crc32.to_be_bytes()[..])
        {
            return Err(invalid_part(wanted));
        }
        let last = i + 1 == listed.len();
        if !last && part.body.len() < PART_BYTES_MIN {
            return Err(S3Error::new(
                400,
                "EntityTooSmall",
                "Your proposed upload is smaller than the minimum allowed object size.",
            )
            .with("ProposedSize", part.body.len().to_string())
            .with("MinSizeAllowed", PART_BYTES_MIN.to_string())
            .with("PartNumber", wanted.part_number.to_string())
            .with("ETag", part.etag.clone()));
        }
        md5s.extend_from_slice(&part.md5);
        crcs.extend_from_slice(&part.crc32.to_be_bytes());
        size += part.body.len();
    }
    let count = listed.len();
    let etag = format!("\"{}-{count}\"", body::hex(&body::md5(&md5s)));
    let crc32_composite = (upload.checksum_algorithm.as_deref() == Some("CRC32"))
        .then(|| format!("{}-{count}", body::base64(&crc32fast::hash(&crcs).to_be_bytes())));
    Ok(Assembled { etag, crc32_composite, size })
}

fn complete_upload(
    inner: &mut Inner<FilesState>,
    mode: Mode,
    stamp: &Stamp,
    complete: Complete,
) -> FakeResponse {
    let Complete { target, parts, conditions, enforce, location } = complete;
    if !inner.state.buckets.contains_key(&target.bucket) {
        return no_such_bucket(&target.bucket).response("POST");
    }
    let Some(upload) = upload_of(&mut inner.state, &target) else {
        return no_such_upload(&target.upload_id).response("POST");
    };
    let assembled = match assemble(upload, &parts, &target.upload_id) {
        Ok(assembled) => assembled,
        Err(e) => return e.response("POST"),
    };
    let mut doc = Document::new("CompleteMultipartUploadResult");
    doc.leaf("Location", &location)
        .leaf("Bucket", &target.bucket)
        .leaf("Key", &target.key)
        .leaf("ETag", &assembled.etag);
    if let Some(crc) = &assembled.crc32_composite {
        doc.leaf("ChecksumCRC32", crc).leaf("ChecksumType", "COMPOSITE");
    }
    let ok = xml_response(200, doc).with_header("x-amz-server-side-encryption", "AES256");
    if mode == Mode::Pretend {
        return ok;
    }
    let replaced =
        inner.state.buckets.get(&target.bucket).and_then(|b| b.current(&target.key)).map(|o| o.etag.clone());
    // A failed condition leaves the upload as it was: nothing happened, and the caller may
    // complete it again or abort it.
    if enforce && let Err(e) = conditions.check(&target.key, replaced.as_deref()) {
        return e.response("POST");
    }
    let Some(upload) = inner.state.uploads.remove(&target.upload_id) else {
        return no_such_upload(&target.upload_id).response("POST");
    };
    inner.state.upload_bytes = inner.state.upload_bytes.saturating_sub(upload.bytes());
    let mut joined = BytesMut::with_capacity(assembled.size);
    for listed in &parts {
        if let Some(part) = upload.parts.get(&listed.part_number) {
            joined.extend_from_slice(&part.body);
        }
    }
    let joined: Bytes = joined.freeze();
    // The user metadata is the Create's: S3 takes `x-amz-meta-*` there, not at the Complete.
    let metadata = user_metadata(&upload.headers);
    let object = Object {
        crc32: body::crc32_base64(&joined),
        body: joined,
        etag: assembled.etag,
        modified_ms: stamp.now_ms,
        headers: upload.headers,
    };
    let params = json!({
        "bucket": target.bucket,
        "key": target.key,
        "body": String::from_utf8_lossy(&object.body),
        "etag": object.etag,
        "size": object.body.len(),
        "if_match": conditions.if_match_text,
        "if_none_match": conditions.if_none_match,
        "replaced": replaced,
        "multipart": {"upload_id": target.upload_id, "parts": parts.len()},
        "metadata": metadata,
    });
    if let Some(bucket) = inner.state.buckets.get_mut(&target.bucket) {
        bucket.set(&target.key, stamp.now_ms, Some(Arc::new(object)));
    }
    inner.ledger.record(Effect {
        seq: 0,
        at_ms: stamp.now_ms,
        kind: "object.put".into(),
        object_id: object_id(&target.bucket, &target.key),
        params,
        idempotency_key: stamp.key.clone(),
        fencing_token: None,
        request_id: stamp.request_id.clone(),
    });
    ok
}

fn abort_upload(inner: &mut Inner<FilesState>, mode: Mode, target: &Target) -> FakeResponse {
    if upload_of(&mut inner.state, target).is_none() {
        return no_such_upload(&target.upload_id).response("DELETE");
    }
    if mode == Mode::Apply
        && let Some(upload) = inner.state.uploads.remove(&target.upload_id)
    {
        inner.state.upload_bytes = inner.state.upload_bytes.saturating_sub(upload.bytes());
    }
    empty(204)
}

/// ListParts, as a read that sees the parts uploaded by `until_ms`.
pub(super) fn list_parts(
    inner: &mut Inner<FilesState>,
    target: &Target,
    query: &PartsQuery,
    until_ms: u64,
) -> FakeResponse {
    if !inner.state.buckets.contains_key(&target.bucket) {
        return no_such_bucket(&target.bucket).response("GET");
    }
    // A stale read sees neither an upload created since nor parts uploaded since.
    let Some(upload) = upload_of(&mut inner.state, target).filter(|u| u.initiated_ms <= until_ms) else {
        return no_such_upload(&target.upload_id).response("GET");
    };
    let visible: Vec<(&u32, &Part)> = upload
        .parts
        .range(query.marker.saturating_add(1)..)
        .filter(|(_, p)| p.modified_ms <= until_ms)
        .collect();
    let page = &visible[..visible.len().min(query.max_parts)];
    let truncated = visible.len() > page.len();
    let mut doc = Document::new("ListPartsResult");
    doc.leaf("Bucket", &upload.bucket).leaf("Key", &upload.key).leaf("UploadId", &target.upload_id);
    doc.leaf("PartNumberMarker", &query.marker.to_string());
    let next = page.last().map_or(0, |(n, _)| **n);
    doc.leaf("NextPartNumberMarker", &next.to_string());
    doc.leaf("MaxParts", &query.max_parts.to_string())
        .leaf("IsTruncated", if truncated { "true" } else { "false" });
    for (number, part) in page {
        doc.open("Part")
            .leaf("PartNumber", &number.to_string())
            .leaf("LastModified", &iso_date(part.modified_ms))
            .leaf("ETag", &part.etag)
            .leaf("Size", &part.body.len().to_string());
        if upload.checksum_algorithm.as_deref() == Some("CRC32") {
            doc.leaf("ChecksumCRC32", &body::base64(&part.crc32.to_be_bytes()));
        }
        doc.close("Part");
    }
    doc.leaf("StorageClass", "STANDARD");
    if let Some(algorithm) = &upload.checksum_algorithm {
        doc.leaf("ChecksumAlgorithm", algorithm);
    }
    xml_response(200, doc)
}
