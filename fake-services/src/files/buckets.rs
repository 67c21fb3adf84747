//! Buckets: CreateBucket, DeleteBucket and ListBuckets. Buckets are not effects: creating and
//! deleting them records nothing in the ledger.

use std::collections::BTreeMap;

use super::answer::{empty, no_such_bucket, xml_response};
use super::http::iso_date;
use super::store::{Bucket, FilesState};
use super::xml::{self, Document, S3Error};
use crate::core::{Commit, Inner, Mode};
use crate::wire::{FakeRequest, FakeResponse};

pub(super) fn prepare_create_bucket(
    req: &FakeRequest,
    bucket: String,
) -> Result<(String, Commit<FilesState>), S3Error> {
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

pub(super) fn prepare_delete_bucket(req: &FakeRequest, bucket: String) -> (String, Commit<FilesState>) {
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

pub(super) fn list_buckets(inner: &mut Inner<FilesState>) -> FakeResponse {
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

pub(super) const OWNER_ID: &str = "75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a";
