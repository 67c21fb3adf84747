//! Scratch directories for a run (executor state, logs) that are gone when the run ends, on
//! every path: success, error, panic (a [`tempfile::TempDir`] removes itself when dropped),
//! and an interrupt: SIGINT or SIGTERM ends the executor process groups still running and
//! removes every directory still registered here before the process exits ([`on_interrupt`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;

use crate::exit;
use crate::interrupt;
use crate::process;

/// How often, and how far apart, an interrupt removes the work directories.
const REMOVE_TRIES: usize = 5;
const REMOVE_PAUSE_MS: u64 = 20;

/// The directories made by [`WorkDir::create`] and not yet removed.
static LIVE_DIRS: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// Exits with `code`, unless an interrupt has come: then the signal watcher's code wins.
/// Every executor has been killed by now; the orphans they left, adopted by `twice` as their
/// subreaper ([`process::become_subreaper`]), are killed first.
pub fn exit(code: i32) -> ! {
    let _held = interrupt::final_hold();
    process::kill_orphans();
    std::process::exit(code)
}

/// A run's scratch directory under the system's temporary directory (`TMPDIR`).
pub struct WorkDir {
    dir: tempfile::TempDir,
}

impl WorkDir {
    /// A new empty directory named `{prefix}` and a random suffix.
    pub fn create(prefix: &str) -> anyhow::Result<WorkDir> {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().with_context(|| {
            format!("cannot create a work directory in {}", std::env::temp_dir().display())
        })?;
        process::lock(&LIVE_DIRS).insert(dir.path().to_path_buf());
        Ok(WorkDir { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        // The TempDir field is dropped after this, which removes the directory.
        process::lock(&LIVE_DIRS).remove(self.dir.path());
    }
}

/// From now on, SIGINT (Ctrl-C) and SIGTERM (a CI job cancelled) end the run cleanly: every
/// executor process group still running is killed, every work directory removed, and the
/// process exits with [`exit::INTERRUPTED`] or [`exit::TERMINATED`]. Without this, the
/// executors (each in a process group of its own, out of the terminal's reach) would outlive
/// `twice` and their directories stay behind.
pub fn on_interrupt() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("cannot start the signal watcher")?;
    // Registered here, before this returns: a signal that comes at once is not missed.
    let (mut interrupt, mut terminate) = runtime
        .block_on(async {
            Ok::<_, std::io::Error>((signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?))
        })
        .context("cannot watch SIGINT and SIGTERM")?;
    std::thread::Builder::new()
        .name("twice-signals".into())
        .spawn(move || {
            let code = runtime.block_on(async {
                tokio::select! {
                    _ = interrupt.recv() => exit::INTERRUPTED,
                    _ = terminate.recv() => exit::TERMINATED,
                }
            });
            let _held = interrupt::begin();
            let groups = process::kill_every_group();
            process::kill_orphans();
            let dirs: Vec<PathBuf> = std::mem::take(&mut *process::lock(&LIVE_DIRS)).into_iter().collect();
            // A file the run was writing as the signal came may land just after the first
            // removal (the run stops at its next spawn, case or report): look again briefly.
            for _ in 0..REMOVE_TRIES {
                for dir in &dirs {
                    let _ = std::fs::remove_dir_all(dir);
                }
                std::thread::sleep(std::time::Duration::from_millis(REMOVE_PAUSE_MS));
                if dirs.iter().all(|d| !d.exists()) {
                    break;
                }
            }
            eprintln!(
                "twice: interrupted; {groups} executor process group(s) killed, {} work director{} removed",
                dirs.len(),
                if dirs.len() == 1 { "y" } else { "ies" }
            );
            std::process::exit(code);
        })
        .context("cannot start the signal watcher")?;
    Ok(())
}
