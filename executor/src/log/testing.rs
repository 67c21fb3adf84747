//! What the log's tests share: a transfer row, signed with a nonce of account `0xaa`.

use crate::model::{Evidence, Intent};
use vocabulary::State;

pub(super) fn transfer(id: &str, nonce: u64) -> Intent {
    Intent {
        id: id.into(),
        action: "chain.transfer".into(),
        params: "{}".into(),
        params_hash: String::new(),
        key: format!("k-{id}"),
        state: State::Recorded,
        attempts: 0,
        replaces: None,
        after: Vec::new(),
        evidence: Evidence::default(),
        maybe_executed: false,
        lease_owner: None,
        lease_epoch: 0,
        lease_until_ms: 0,
        version: 0,
        created_ms: 0,
        updated_ms: 0,
        key_first_sent_ms: None,
        last_sent_ms: None,
    }
    .signed(nonce)
}

impl Intent {
    fn signed(mut self, nonce: u64) -> Intent {
        self.evidence.from = Some("0xaa".into());
        self.evidence.nonce = Some(nonce);
        self
    }
}
