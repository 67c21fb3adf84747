//! Time, injected.
//!
//! Every fake and the reference executor read time through a [`Clock`], so that the same code
//! runs on wall time (`twice serve`, `twice-executor`) and on tokio's paused, virtual time
//! (the sim driver), where a run is reproducible. The fakes add their own per-service jumps
//! on top (`fake_services::ServiceClock`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of milliseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A clock set before 1970 reads as the epoch rather than failing: time only orders
        // events here, and every wait has its own bound.
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }
}

/// Time measured by tokio from a fixed epoch.
///
/// Under a paused runtime this is virtual time, advanced only by sleeps, which makes a run
/// reproducible; under a normal runtime it tracks the wall clock.
#[derive(Debug, Clone)]
pub struct TokioClock {
    start: tokio::time::Instant,
    epoch_ms: u64,
}

impl TokioClock {
    /// A clock that reads `epoch_ms` now and moves with tokio's time.
    pub fn starting_at(epoch_ms: u64) -> Self {
        TokioClock { start: tokio::time::Instant::now(), epoch_ms }
    }

    /// A clock that starts at the current wall-clock time.
    pub fn from_wall_clock() -> Self {
        Self::starting_at(SystemClock.now_ms())
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        self.epoch_ms + self.start.elapsed().as_millis() as u64
    }
}

/// A clock that moves only when told to; for unit tests of one function.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    pub fn new(now_ms: u64) -> Self {
        ManualClock { now_ms: AtomicU64::new(now_ms) }
    }

    pub fn advance_ms(&self, by_ms: u64) {
        self.now_ms.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance_ms(5);
        assert_eq!(clock.now_ms(), 1_005);
    }

    #[test]
    fn a_tokio_clock_starts_at_its_epoch() {
        let clock = TokioClock::starting_at(42);
        assert!((42..42 + 60_000).contains(&clock.now_ms()));
        assert!(TokioClock::from_wall_clock().now_ms() > 1_700_000_000_000);
    }
}
