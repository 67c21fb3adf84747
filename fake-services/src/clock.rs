//! Service time.
//!
//! Every fake reads time through a [`Clock`] (the one trait of [`vocabulary::clock`], which the
//! executor reads too), so the same code runs on wall time (behind `twice serve`) and on
//! tokio's paused, virtual time (the sim driver). On top of the base clock each service keeps
//! its own forward offset, which the control API can jump: that is how a test makes 25 hours
//! pass for idempotency-key retention without waiting for them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use vocabulary::clock::Clock;

/// The last millisecond of year 9999, where service time stops: HTTP dates (`Last-Modified`,
/// `Date`) cannot say a later one.
pub const SERVICE_TIME_MS_MAX: u64 = 253_402_300_799_999;

/// One service's view of time: a base clock plus the jumps applied to this service.
#[derive(Clone)]
pub struct ServiceClock {
    base: Arc<dyn Clock>,
    jumped_ms: Arc<AtomicU64>,
}

impl ServiceClock {
    pub fn new(base: Arc<dyn Clock>) -> Self {
        ServiceClock { base, jumped_ms: Arc::new(AtomicU64::new(0)) }
    }

    /// Milliseconds since the Unix epoch, as this service sees them, at most
    /// [`SERVICE_TIME_MS_MAX`].
    pub fn now_ms(&self) -> u64 {
        self.base.now_ms().saturating_add(self.jumped_ms.load(Ordering::SeqCst)).min(SERVICE_TIME_MS_MAX)
    }

    /// Moves this service's time forward; time never moves back, and stops at
    /// [`SERVICE_TIME_MS_MAX`] however far a jump asks (a wrapped sum would move it back).
    pub fn jump_ms(&self, by_ms: u64) {
        let _ = self.jumped_ms.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |jumped| {
            Some(jumped.saturating_add(by_ms).min(SERVICE_TIME_MS_MAX))
        });
    }

    /// The total of all jumps so far.
    pub fn jumped_ms(&self) -> u64 {
        self.jumped_ms.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for ServiceClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceClock").field("now_ms", &self.now_ms()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocabulary::clock::ManualClock;

    #[test]
    fn jumps_add_to_the_base_clock() {
        let base = Arc::new(ManualClock::new(1_000));
        let clock = ServiceClock::new(base.clone());
        clock.jump_ms(500);
        base.advance_ms(10);
        assert_eq!(clock.now_ms(), 1_510);
        assert_eq!(clock.jumped_ms(), 500);
    }
}
