//! Where a request's journal entry ends: as the pipeline concludes it, straight from a commit
//! answered at once, or as `abandoned` when the caller goes away first ([`Abandon`]); and the
//! `twice::request` log line of each entry that ends.

use std::sync::atomic::Ordering;

use super::service::ServiceCore;
use super::state::{Ctx, Inner};
use crate::fault_engine::AfterCommit;
use crate::wire::FakeRequest;
use vocabulary::JournalEntry;

impl<S: Default + Send + 'static> ServiceCore<S> {
    /// Ends the journal entry of a write answered straight from its commit, in the same hold
    /// of the lock, when nothing can come between the commit and the answer: no wait after
    /// it, an answer rather than a dropped or held connection, and no refused parameters to
    /// read. [`ServiceCore::conclude`] then leaves the entry as it is. Nothing awaits in
    /// between, so a caller that goes away cannot leave the entry saying "answered" wrongly.
    pub(super) fn end_answered_locked(&self, inner: &mut Inner<S>, ctx: &Ctx, status: u16) {
        let plan = &ctx.plan;
        let answered = matches!(plan.after_commit, AfterCommit::Respond | AfterCommit::Error { .. });
        let reads_refusal = self.refusals.is_some() && vocabulary::needs_decision(status);
        if plan.after_ms > 0 || !answered || reads_refusal {
            return;
        }
        let ended = inner.journal.end(ctx.seq, self.clock.now_ms(), "answered", Some(status), false, None);
        log_request(self.name, ended);
        ctx.ended.store(true, Ordering::Relaxed);
    }

    pub(super) fn end(
        &self,
        ctx: &Ctx,
        req: &FakeRequest,
        outcome: &'static str,
        status: Option<u16>,
        replayed: bool,
    ) {
        if ctx.ended.load(Ordering::Relaxed) {
            return;
        }
        let now_ms = self.clock.now_ms();
        // Read outside the lock: decoding a body (a signed transaction) takes a while. Only
        // writes are read: a refused read asked for no effect.
        let params = match (status, self.refusals) {
            (Some(status), Some(read)) if ctx.is_write && vocabulary::needs_decision(status) => read(req),
            _ => None,
        };
        log_request(self.name, self.lock().journal.end(ctx.seq, now_ms, outcome, status, replayed, params));
        ctx.ended.store(true, Ordering::Relaxed);
    }

    /// A guard that marks the request abandoned unless it ends normally first.
    pub fn watch<'a>(&'a self, ctx: &'a Ctx) -> Abandon<'a, S> {
        Abandon { core: self, ctx }
    }
}

/// Closes a request's journal entry as `abandoned` if the request's future is dropped before
/// it ended (hyper drops it when the caller disconnects mid-request).
pub struct Abandon<'a, S: Default + Send + 'static> {
    core: &'a ServiceCore<S>,
    ctx: &'a Ctx,
}

impl<S: Default + Send + 'static> Drop for Abandon<'_, S> {
    fn drop(&mut self) {
        // A request that ended normally (nearly all) costs neither the clock nor the lock.
        if self.ctx.ended.load(Ordering::Relaxed) {
            return;
        }
        let now_ms = self.core.clock.now_ms();
        log_request(self.core.name, self.core.lock().journal.abandon(self.ctx.seq, now_ms));
    }
}

/// The `twice::request` line (debug) of a request whose journal entry just ended: the one spot
/// every request to a fake passes, over loopback HTTP and in the sim's in-process transport
/// alike. Its duration is on the service's clock (virtual in sim). Control requests have no
/// journal entry and their own line ([`ServiceCore::control`]).
fn log_request(service: &'static str, entry: Option<&JournalEntry>) {
    let Some(e) = entry else { return };
    // The macro tests its level before it reads a field, so a run without debug logs pays
    // for this call and one comparison.
    let duration_ms = e.ended_ms.unwrap_or(e.at_ms).saturating_sub(e.at_ms);
    let origin = e.origin.as_deref().unwrap_or("-");
    match e.status {
        Some(status) => tracing::debug!(
            target: "twice::request",
            service, method = %e.method, path = %e.path, status, outcome = %e.outcome,
            request_id = %e.request_id, duration_ms, origin, faults = e.faults.len(),
            "request"
        ),
        // Reset before an answer, or abandoned by its caller: no status was sent.
        None => tracing::debug!(
            target: "twice::request",
            service, method = %e.method, path = %e.path, outcome = %e.outcome,
            request_id = %e.request_id, duration_ms, origin, faults = e.faults.len(),
            "request"
        ),
    }
}
