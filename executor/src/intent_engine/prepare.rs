//! What a first send records before it leaves: a put's precondition (what the object is
//! now) and a transfer's signed bytes, with a nonce that no other intent of the log holds
//! (`NonceBook`). A send that cannot be prepared is not sent.

use std::collections::BTreeSet;

use super::Executor;
use super::planned::{Planned, Sending};
use crate::log::LogError;
use crate::model::Action;
use crate::services::{self, ChainFacts};
use crate::signing::{ChainKey, SignedTransfer};
use vocabulary::State;
use vocabulary::protocol::Service;

/// The chain account's nonces as one pass allocates them: the lowest nonce at or above the
/// node's pending nonce that no intent of the log (or of this pass) has signed with. The
/// node's count may lag (a stale read) or miss what the log signed and has not broadcast;
/// the log's claims may miss what another signer sent: either alone could reuse a nonce.
struct NonceBook {
    key: ChainKey,
    facts: ChainFacts,
    taken: BTreeSet<u64>,
}

impl NonceBook {
    fn allocate(&mut self) -> u64 {
        let mut nonce = self.facts.pending_nonce;
        // Bounded: `taken` is finite, so some nonce at most `taken.len()` above is free.
        while self.taken.contains(&nonce) {
            nonce += 1;
        }
        self.taken.insert(nonce);
        nonce
    }
}

impl Executor {
    /// Reads and records what each first send needs before it may leave (see
    /// `services::needs_preparation`). A send that cannot be prepared is not sent: a recorded
    /// intent counts the try and waits as after a refused connection, giving up (`failed`,
    /// since nothing was ever sent) after `attempts_max` tries.
    pub(super) async fn prepare(
        &self,
        sends: Vec<Sending>,
        writes: &mut Vec<Planned>,
    ) -> Result<Vec<Sending>, LogError> {
        let transport = self.world.transport.as_ref();
        let mut book: Option<Result<NonceBook, String>> = None;
        let mut ready = Vec::with_capacity(sends.len());
        for mut sending in sends {
            let Some(service) = self.config.services.get(sending.action.service()) else {
                ready.push(sending);
                continue;
            };
            if !services::needs_preparation(&sending.action, &sending.planned.new.evidence, &service.contract)
            {
                ready.push(sending);
                continue;
            }
            let prepared = match &sending.action {
                Action::PutObject { .. } => {
                    services::read_precondition(&sending.action, &self.config, service, transport)
                        .await
                        .map(|p| sending.planned.new.evidence.precondition = Some(p))
                }
                Action::Transfer { .. } => self
                    .sign(&sending.action, service, &mut book)
                    .await?
                    .map(|signed| sending.planned.new.evidence.record_signed(&signed)),
                Action::Refund { .. } | Action::CreateWorkspace { .. } | Action::SendMessage { .. } => Ok(()),
            };
            match prepared {
                Ok(()) => ready.push(sending),
                Err(error) => writes.extend(self.not_prepared(&sending, error)),
            }
        }
        Ok(ready)
    }

    /// Signs a transfer with the next free nonce. The chain facts are read once per pass.
    async fn sign(
        &self,
        action: &Action,
        service: &Service,
        book: &mut Option<Result<NonceBook, String>>,
    ) -> Result<Result<SignedTransfer, String>, LogError> {
        if book.is_none() {
            let opened = match services::chain_key(&self.config) {
                Err(e) => Err(e),
                Ok(key) => {
                    match services::chain_facts(
                        key.address(),
                        &self.config,
                        service,
                        self.world.transport.as_ref(),
                    )
                    .await
                    {
                        Err(e) => Err(e),
                        Ok(facts) => {
                            let taken = self.log().claimed_nonces(key.address())?;
                            Ok(NonceBook { key, facts, taken })
                        }
                    }
                }
            };
            *book = Some(opened);
        }
        let Some(Ok(book)) = book.as_mut() else {
            let error = match book {
                Some(Err(e)) => e.clone(),
                _ => "no chain facts".to_string(),
            };
            return Ok(Err(error));
        };
        let nonce = book.allocate();
        let signed = book
            .facts
            .transfer(action, nonce)
            .and_then(|t| book.key.sign_transfer(&t).map_err(|e| e.to_string()));
        Ok(signed)
    }

    /// The row of a send whose first send could not be prepared, or `None` to leave it.
    fn not_prepared(&self, sending: &Sending, error: String) -> Option<Planned> {
        // Only a first send is prepared; anything else was prepared when it was first sent.
        if sending.planned.from != State::Recorded {
            return None;
        }
        let now = sending.planned.new.updated_ms;
        let mut new = sending.before.clone();
        new.attempts += 1;
        // Nothing was sent; the time drives the pause before the next try, as after a
        // connection that could not be made.
        new.last_sent_ms = Some(now);
        new.updated_ms = now;
        new.evidence.last_error = Some(error.clone());
        let (state, note) = if new.attempts >= self.config.limits.attempts_max {
            (
                State::Failed,
                format!(
                    "never sent: what its first send needs could not be read in {} tries: {error}",
                    new.attempts
                ),
            )
        } else {
            (State::Recorded, format!("not sent yet: {error}"))
        };
        new.state = state;
        new.evidence.reason = Some(note.clone());
        Some(Planned {
            new,
            expect_version: sending.planned.expect_version,
            from: sending.planned.from,
            note,
        })
    }
}
