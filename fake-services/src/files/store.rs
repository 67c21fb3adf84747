//! The store: buckets, their keys, and each key's versions over service time.
//!
//! Separate from the operations because every one of them reads or writes it, and because it
//! alone decides what a stale read can see: a key keeps the versions of the last
//! [`HISTORY_MS`], and a read as of an earlier time finds the version current then.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;

/// How far back a stale read can look: the longest lag a `stale_read` rule may ask for.
/// Older versions of an object are forgotten.
const HISTORY_MS: u64 = vocabulary::rule::HOLD_MS_MAX;

/// One stored object.
#[derive(Debug)]
pub(super) struct Object {
    pub(super) body: Bytes,
    /// Quoted, as in the `ETag` header.
    pub(super) etag: String,
    /// `x-amz-checksum-crc32` of the body, computed for every object so that a GET with
    /// checksum mode on can always be validated.
    pub(super) crc32: String,
    pub(super) modified_ms: u64,
    /// Stored headers (lowercase names) in the order they came.
    pub(super) headers: Vec<(String, String)>,
}

/// A key's state from some service time on: an object, or nothing (deleted).
#[derive(Debug, Clone)]
pub(super) struct Version {
    pub(super) at_ms: u64,
    pub(super) object: Option<Arc<Object>>,
}

#[derive(Debug, Default)]
pub(super) struct Bucket {
    pub(super) created_ms: u64,
    /// Per key, its versions in commit order; the last is the current one.
    pub(super) keys: BTreeMap<String, Vec<Version>>,
}

impl Bucket {
    pub(super) fn current(&self, key: &str) -> Option<&Arc<Object>> {
        self.keys.get(key)?.last()?.object.as_ref()
    }

    /// The object as a read that sees only commits up to `until_ms` finds it.
    pub(super) fn visible(&self, key: &str, until_ms: u64) -> Option<&Arc<Object>> {
        self.keys.get(key)?.iter().rev().find(|v| v.at_ms <= until_ms)?.object.as_ref()
    }

    pub(super) fn has_objects(&self) -> bool {
        self.keys.values().any(|versions| versions.last().is_some_and(|v| v.object.is_some()))
    }

    /// Records the key's new state and forgets versions no stale read can reach.
    pub(super) fn set(&mut self, key: &str, at_ms: u64, object: Option<Arc<Object>>) {
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

/// One part of a multipart upload.
#[derive(Debug)]
pub(super) struct Part {
    pub(super) body: Bytes,
    /// The MD5 of the body, which the object's multipart ETag is made of.
    pub(super) md5: [u8; 16],
    /// Quoted, as in the `ETag` header.
    pub(super) etag: String,
    /// CRC32 of the body, which a composite CRC32 checksum is made of.
    pub(super) crc32: u32,
    pub(super) modified_ms: u64,
}

/// A multipart upload between CreateMultipartUpload and its Complete or Abort.
#[derive(Debug)]
pub(super) struct Upload {
    pub(super) bucket: String,
    pub(super) key: String,
    pub(super) initiated_ms: u64,
    /// Headers the object will be stored with, from CreateMultipartUpload.
    pub(super) headers: Vec<(String, String)>,
    /// `x-amz-checksum-algorithm` of the create, uppercase (`CRC32`), if any.
    pub(super) checksum_algorithm: Option<String>,
    /// By part number.
    pub(super) parts: BTreeMap<u32, Part>,
}

impl Upload {
    pub(super) fn bytes(&self) -> usize {
        self.parts.values().map(|p| p.body.len()).sum()
    }
}

/// The files fake's buckets and objects.
#[derive(Debug, Default)]
pub struct FilesState {
    pub(super) buckets: BTreeMap<String, Bucket>,
    /// Conditional writes between their arrival and their commit, by `bucket/key`, with the
    /// claim number of the request that holds each.
    pub(super) conditional: BTreeMap<String, u64>,
    /// Multipart uploads in progress, by upload id.
    pub(super) uploads: BTreeMap<String, Upload>,
    /// Bytes held by the parts of every upload in progress, kept as parts come and go so
    /// that the bound on them is checked without a scan under the lock.
    pub(super) upload_bytes: usize,
    /// Buckets whose policy denies the caller every write: their objects may be read, and
    /// every request that would store, delete or upload one is 403 `AccessDenied`.
    pub(super) read_only: BTreeSet<String>,
}

pub(super) fn object_id(bucket: &str, key: &str) -> String {
    format!("{bucket}/{key}")
}
