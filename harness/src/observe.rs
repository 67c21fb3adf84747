//! What a run observed: the executor's claims, the ledgers' truth, and the timeline between.
//! Drivers produce an [`Observed`]; the checker reads it and nothing else. The types live in
//! the `reports` crate, which renders them.

pub use reports::model::{Claim, EffectRef, Moment, Observed, Pending, Route, SettleWait};
