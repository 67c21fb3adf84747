//! Conditional writes: the conditions of a PUT or DELETE (`If-None-Match: *`, `If-Match`),
//! checked at commit with 412, and the claim a conditional write holds on its key from its
//! arrival to its commit, which makes a second conditional write meanwhile a 409.
//!
//! Apart from PUT and DELETE because both use it, and because the claim's life (ended by the
//! commit under the lock, or by a drop when the caller goes away) is its own invariant.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Files;
use super::answer::{invalid_argument, no_such_bucket, no_such_key, precondition_failed};
use super::http::{etag_matches, etags};
use super::payload::header;
use super::store::{FilesState, object_id};
use super::xml::S3Error;
use crate::core::ServiceCore;
use crate::wire::FakeRequest;

/// The conditions of a write.
#[derive(Debug, Clone, Default)]
pub(super) struct Conditions {
    /// `If-None-Match: *`: only if the key holds no object.
    pub(super) if_none_match: bool,
    /// `If-Match`: only if the current object's ETag is one of these (bare) tags.
    pub(super) if_match: Option<Vec<String>>,
    /// `If-Match` as recorded in the ledger: quoted tags, or `*`.
    pub(super) if_match_text: Option<String>,
}

impl Conditions {
    pub(super) fn of(req: &FakeRequest, none_match_allowed: bool) -> Result<Conditions, S3Error> {
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

    pub(super) fn any(&self) -> bool {
        self.if_none_match || self.if_match.is_some()
    }

    /// Whether a write may replace `current` (an ETag, or nothing): 412 or 404 if not.
    pub(super) fn check(&self, key: &str, current: Option<&str>) -> Result<(), S3Error> {
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

impl Files {
    /// Checks that the bucket exists and, for a conditional write while conditional writes
    /// are on, marks the key as having one in flight (409 if another already is).
    pub(super) fn admit_write(
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
}

/// A conditional write's claim on its key, from its arrival to its commit. The commit ends
/// it under the service's lock; if the request is cancelled before (its caller gone), the
/// drop ends it.
pub(super) struct InFlight {
    core: Arc<ServiceCore<FilesState>>,
    id: String,
    token: u64,
    armed: bool,
}

impl InFlight {
    pub(super) fn end(mut self, state: &mut FilesState) {
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
