//! Exit codes, named: CI systems read them.

/// Every invariant held (or, for `serve`, a clean stop).
pub const OK: i32 = 0;
/// An invariant broke (for `check-executor`, also: a protocol rule failed).
pub const VIOLATION: i32 = 1;
/// The harness itself could not run: bad arguments, a port in use, an unreadable file.
pub const HARNESS_ERROR: i32 = 2;
/// Stopped by SIGINT (Ctrl-C), after killing its executors and removing its work directories.
pub const INTERRUPTED: i32 = 130;
/// Stopped by SIGTERM, the same way.
pub const TERMINATED: i32 = 143;
