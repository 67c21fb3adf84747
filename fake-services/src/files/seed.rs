//! Seeding: buckets and objects that were there before anything happened, from the Rust API
//! ([`Files::seed_bucket`](super::Files::seed_bucket), [`Files::seed_object`](super::Files::seed_object))
//! or the control API's JSON.
//!
//! Apart from the operations because a seeded object is not an effect: it enters no ledger,
//! and every view, however stale, sees it.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::body;
use super::http::{KEY_BYTES_MAX, check_bucket_name};
use super::store::{Bucket, FilesState, Object, Version};
use crate::core::Inner;

pub(super) fn seed_bucket(state: &mut FilesState, name: &str, now_ms: u64) -> Result<(), String> {
    check_bucket_name(name)?;
    state
        .buckets
        .entry(name.to_string())
        .or_insert_with(|| Bucket { created_ms: now_ms, keys: BTreeMap::new() });
    Ok(())
}

/// Makes `name` a bucket whose policy denies every write (creating it if needed): its
/// objects may be read, and every request that would store, delete or upload one is answered
/// 403 `AccessDenied`, before anything is stored.
pub(super) fn seed_read_only_bucket(state: &mut FilesState, name: &str, now_ms: u64) -> Result<(), String> {
    seed_bucket(state, name, now_ms)?;
    state.read_only.insert(name.to_string());
    Ok(())
}

pub(super) fn seed_object(
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

pub(super) fn seed_from_json(
    inner: &mut Inner<FilesState>,
    body: &[u8],
    now_ms: u64,
) -> Result<Value, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Seed {
        #[serde(default)]
        buckets: Vec<String>,
        #[serde(default)]
        objects: Vec<SeedObject>,
        #[serde(default)]
        read_only_buckets: Vec<String>,
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
            "expected {{\"buckets\": [\"reports\"], \"objects\": [{{\"bucket\": \"reports\", \"key\": \"q3.csv\", \"body\": \"text\"}}], \"read_only_buckets\": [\"audit\"]}}: {e}"
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
    // After the objects: seeding fills a bucket the caller may not write.
    let mut read_only = Vec::new();
    for name in seed.read_only_buckets {
        seed_read_only_bucket(&mut inner.state, &name, now_ms)?;
        read_only.push(name);
    }
    Ok(json!({"buckets": buckets, "objects": objects, "read_only_buckets": read_only}))
}
