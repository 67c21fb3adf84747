//! Whether SIGINT or SIGTERM has come, and the hold that keeps a run from acting on it.
//!
//! The signal watcher ([`crate::workdir::on_interrupt`]) kills the executors and removes the
//! run's directories; from the signal to its exit, the run (which sees its executors die) must
//! neither make a directory the watcher would have to remove again, nor start a process, nor
//! write a report about the killed executors. Everything the run does that an interrupt must
//! stop goes through this module, which depends on nothing else of the harness, so that
//! `process` and `workdir` (and everything above them) can use it.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Held by the signal watcher from the signal to its exit.
static EXIT: Mutex<()> = Mutex::new(());
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn exit_lock() -> MutexGuard<'static, ()> {
    // The guarded value is `()`: a panic while it was held leaves nothing half-made.
    EXIT.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether SIGINT or SIGTERM has come.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Waits for the signal watcher's exit if an interrupt has come (and returns at once if none
/// has): called before anything that reports on the run.
pub fn hold_if_interrupted() {
    if interrupted() {
        let _held = exit_lock();
    }
}

/// Marks the run interrupted and holds every [`hold_if_interrupted`] until the guard is
/// dropped (the signal watcher drops it only by exiting the process).
pub fn begin() -> MutexGuard<'static, ()> {
    let held = exit_lock();
    INTERRUPTED.store(true, Ordering::SeqCst);
    held
}

/// The last word before the process exits: waits for the signal watcher if an interrupt
/// came, then holds every other exit until this one is done.
pub fn final_hold() -> MutexGuard<'static, ()> {
    hold_if_interrupted();
    exit_lock()
}

/// Makes `dir` and its parents, as the run's scratch and report directories are made: never
/// after an interrupt, which removes the run's directories (the caller waits for the exit).
pub fn make_dir(dir: &Path) -> std::io::Result<()> {
    hold_if_interrupted();
    std::fs::create_dir_all(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_interrupt_means_no_hold_and_directories_are_made() {
        assert!(!interrupted());
        hold_if_interrupted();
        let base = tempfile::tempdir().expect("a temp dir");
        let dir = base.path().join("a/b");
        make_dir(&dir).expect("made");
        assert!(dir.is_dir());
    }
}
