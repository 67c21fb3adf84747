//! The fault of each kind the generator draws, with parameters sized to the service's
//! contract.

use vocabulary::{Contract, FaultSpec};

use super::REQUEST_TIMEOUT_MS;
use crate::generate::draw::{
    COMMIT_AFTER_TIMEOUT, DELAY_WEBHOOK, DELIVER_LATE, DUPLICATE_WEBHOOK, FORGET_KEYS, IGNORE_KEYS, LATENCY,
    LOSE_WEBHOOK_ACK, REDELIVER, REFUSE, REJECT, STALE_READ, WEBHOOK_ENDPOINT_DOWN,
};

/// Statuses a rejection answers, one per `pick` (0 to 5): half of them say "not now" (429 and
/// 503, retried) or "no" (402, a plain failure), half need a person's decision (403, 400,
/// 422: escalated, never retried). A rejection never executes, so every one is fair.
const REJECT_STATUSES: [u16; 6] = [429, 503, 402, 403, 400, 422];
/// A node's: it answers a raw transaction it will not take with a JSON-RPC error, never with
/// a 402, and over HTTP only the transient ones. A refusal for good (a gateway's 401 or 403)
/// would leave the refused transfer's nonce unused, and every transfer signed after it waiting
/// behind that gap for ever (filling it takes a transaction nobody authorised): a case no
/// correct executor could bring to an end.
const CHAIN_REJECT_STATUSES: [u16; 2] = [429, 503];

/// The fault of kind `kind` (see [`FAULT_KINDS`](super::draw::FAULT_KINDS)), with parameters
/// sized to the contract (whether the contract admits it at all is checked by the caller);
/// `pick` chooses a rejection's status.
pub(in crate::generate) fn fault_for(
    kind: usize,
    param: u64,
    pick: u64,
    c: &Contract,
    chain: bool,
) -> FaultSpec {
    match kind {
        0 => FaultSpec::DropAfterCommit,
        1 => FaultSpec::ErrorAfterCommit { status: 500 },
        2 => FaultSpec::TimeoutAfterCommit { hold_ms: REQUEST_TIMEOUT_MS * 3 },
        // Past the caller's timeout when the settle bound allows it: the commit lands after
        // the caller gave up, and a read-back right away says "not there".
        COMMIT_AFTER_TIMEOUT => FaultSpec::CommitAfterTimeout {
            delay_ms: Some(c.settle_ms_max.min(REQUEST_TIMEOUT_MS + 200 * (param + 1))),
        },
        4 => FaultSpec::SilentNoop,
        STALE_READ => FaultSpec::StaleRead { lag_ms: c.read_lag_ms_max },
        IGNORE_KEYS => FaultSpec::IgnoreKeys,
        FORGET_KEYS => FaultSpec::ForgetKeys { older_than_ms: Some(c.key_retention_ms) },
        REFUSE => FaultSpec::Refuse,
        REJECT if chain => FaultSpec::Reject {
            status: CHAIN_REJECT_STATUSES[pick as usize % CHAIN_REJECT_STATUSES.len()],
            body: None,
        },
        REJECT => {
            FaultSpec::Reject { status: REJECT_STATUSES[pick as usize % REJECT_STATUSES.len()], body: None }
        }
        LATENCY => FaultSpec::Latency { before_ms: 100 * param, after_ms: 100 * (2 - param) },
        // Past the caller's read-back when the settle bound allows it, as a late commit is:
        // the inbox says "not there" for a message that is on its way.
        DELIVER_LATE => {
            FaultSpec::DeliverLate { delay_ms: c.settle_ms_max.min(REQUEST_TIMEOUT_MS + 200 * (param + 1)) }
        }
        REDELIVER => FaultSpec::Redeliver { after_ms: c.settle_ms_max.min(250 * param) },
        DUPLICATE_WEBHOOK => FaultSpec::DuplicateWebhook { after_ms: c.settle_ms_max.min(250 * param) },
        DELAY_WEBHOOK => FaultSpec::DelayWebhook { delay_ms: c.settle_ms_max.min(500 * (param + 1)) },
        LOSE_WEBHOOK_ACK => FaultSpec::LoseWebhookAck,
        WEBHOOK_ENDPOINT_DOWN => {
            FaultSpec::WebhookEndpointDown { for_ms: c.settle_ms_max.min(1_000 * (param + 1)) }
        }
        _ => FaultSpec::StaleWebhook,
    }
}
