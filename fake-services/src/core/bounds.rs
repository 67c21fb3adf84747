//! What one service holds at most (docs/faults.md, "Limits"): the journal, the ledger, the
//! idempotency keys and the objects seeded. Bounds refuse; they never forget.

/// What one service holds at most (docs/faults.md, "Limits"). Reaching a bound refuses what
/// would go past it, in the service's own error shape; nothing already held is let go, since
/// a ledger effect or journal entry dropped could hide harm from the checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Requests journaled; past it, every request to the service is refused with 503 (and
    /// counted as `refused` in the journal) until a reset.
    pub journal_entries_max: usize,
    /// Effects made by requests; past it, every write is refused with 503 before it commits.
    /// Effects the service makes by itself later (a delivery, a mined block) for writes it
    /// accepted still enter the ledger.
    pub ledger_effects_max: usize,
    /// Idempotency keys held; a new key past it, once keys past retention are forgotten, is
    /// refused with 503 (a key still held is never forgotten early: a retry would then
    /// make a second effect).
    pub keys_max: usize,
    /// Objects seeded over the control API (every item of a seed's lists); past it, a seed is
    /// refused with 400.
    pub seeded_objects_max: usize,
}

/// Effects a service's ledger holds before it refuses writes.
pub const LEDGER_EFFECTS_MAX: usize = 1_000_000;
/// Idempotency keys a service holds before it refuses a new one.
pub const KEYS_MAX: usize = 1_000_000;
/// Objects seeded over the control API before a seed is refused.
pub const SEEDED_OBJECTS_MAX: usize = 100_000;

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            journal_entries_max: crate::record::JOURNAL_ENTRIES_MAX,
            ledger_effects_max: LEDGER_EFFECTS_MAX,
            keys_max: KEYS_MAX,
            seeded_objects_max: SEEDED_OBJECTS_MAX,
        }
    }
}
