//! Fault rules: the public rule format lives in [`vocabulary::rule`], shared with the
//! scenarios that embed rules; this path stays so that `crate::rule::…` and
//! `fake_services::rule::…` keep naming the same types.

pub use vocabulary::rule::*;
