//! Exit codes, named: CI systems read them.

/// Every invariant held (or, for `serve`, a clean stop).
pub const OK: i32 = 0;
/// An invariant broke (for `check-executor`, also: a protocol rule failed).
pub const VIOLATION: i32 = 1;
/// The harness itself could not run: bad arguments, a port in use, an unreadable file.
pub const HARNESS_ERROR: i32 = 2;
/// `twice check --no-wait` (or a kit's check asked not to wait): nothing was violated in what
/// was read, but something still pending could change a ledger (a late commit, a delivery
/// due). No verdict yet: harm may still land, so this is not a pass.
pub const UNSETTLED: i32 = 3;
/// Stopped by SIGINT (Ctrl-C), after killing its executors and removing its work directories.
pub const INTERRUPTED: i32 = 130;
/// Stopped by SIGTERM, the same way.
pub const TERMINATED: i32 = 143;

/// The exit code of a judged run: [`VIOLATION`] when it failed, else [`UNSETTLED`] when a
/// verdict was judged before the world settled, else [`OK`].
pub fn of(results: &results::RunResults) -> i32 {
    if results.failed() {
        VIOLATION
    } else if results.results.iter().any(|r| r.observed.judged_unsettled()) {
        UNSETTLED
    } else {
        OK
    }
}
