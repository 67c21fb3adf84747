//! Service contracts: the one [`Contract`] type lives in [`vocabulary::contract`], where the
//! executor and the scenarios read it too. A fake's contract is a setting (some terms change
//! what it does: keys ignored, key retention, unique business keys, fencing) as well as the
//! promise the harness announces; this path stays so that `crate::contract::…` and
//! `fake_services::contract::…` keep naming the same type.

pub use vocabulary::contract::*;
