//! What the executor is told at start: its services with their contracts, its secrets and its
//! limits. The JSON shapes are those of the `init` message in `docs/protocol.md`; they belong
//! to the protocol, which both ends share, so they are defined in `vocabulary::protocol`.

/// What a service promises (design §4): the one contract type the fakes and the scenarios
/// use too. Absent terms take the cautious reading (`Contract::default`): keys are not assumed
/// to be honoured, reads are strong, acks reliable.
pub use vocabulary::contract::{Acks, Contract, KeyPolicy, Reads};
pub use vocabulary::protocol::{Config, Limits, Service};
