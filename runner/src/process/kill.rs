//! Signals to executors and what they leave behind: the process groups running now (all
//! killed at an interrupt), the processes marked with [`MARKER_VARIABLE`] that left their
//! group, and the orphans `twice` adopts as a child subreaper. Every wait here is bounded.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::lock;

/// The process groups of the executors running now, for an interrupt to end
/// ([`kill_every_group`]).
static RUNNING_GROUPS: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

pub(super) fn running_groups() -> MutexGuard<'static, BTreeSet<u32>> {
    lock(&RUNNING_GROUPS)
}

/// How long [`kill_every_group`] waits for the groups it killed to be gone.
const GROUPS_GONE_MS_MAX: u64 = 2_000;

/// The variable every executor process is started with, valued `{twice's pid}.{n}`, one value
/// per process: its children inherit it, also those that leave its process group
/// (`setsid()`, a double-forked daemon), so [`kill_marked`] finds them in the process table.
pub const MARKER_VARIABLE: &str = "TWICE_EXECUTOR_PROCESS";
/// How long [`Process::kill`] keeps killing an executor's marked processes until none is left
/// (a process may fork while it is being killed).
pub(super) const MARKED_GONE_MS_MAX: u64 = 2_000;
/// How long [`kill_orphans`] keeps killing the orphans adopted by `twice`.
const ORPHANS_GONE_MS_MAX: u64 = 2_000;

/// The pids of the processes (other than this one) whose environment holds `marker`
/// (`NAME=VALUE`) and which are not zombies (a zombie's environment reads empty).
fn marked(marker: &[u8]) -> Vec<i32> {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| *pid != own)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| environ.split(|b| *b == 0).any(|v| v == marker))
        })
        .filter_map(|pid| i32::try_from(pid).ok())
        .collect()
}

/// The parent of `pid`, from `/proc/PID/stat` (`pid (comm) S ppid ...`).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Reaps `pid` if it is a child of this process that has ended (an adopted orphan; see
/// [`become_subreaper`]). Never called on a pid tokio waits for.
fn reap(pid: i32) {
    // SAFETY: waitpid takes integers and a null status pointer; it touches no memory of ours.
    unsafe {
        libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
    }
}

/// SIGKILLs, once, every live process that carries `marker` except `spared` (the process
/// tokio reaps), and reaps those that are this process's children; returns how many it
/// signalled.
pub fn kill_marked(marker: &[u8], spared: Option<i32>) -> usize {
    let own = i32::try_from(std::process::id()).ok();
    let pids = marked(marker);
    for &pid in &pids {
        // SAFETY: kill(2) takes two integers and touches no memory of ours.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
    for &pid in &pids {
        if Some(pid) != spared && parent_of(pid) == own {
            reap(pid);
        }
    }
    pids.len()
}

/// Linux only: makes this process the child subreaper of everything it starts, so that a
/// process an executor orphans (a daemon that double-forked and called `setsid()`) is
/// adopted by `twice` rather than by init, and [`kill_orphans`] can end it even when it
/// cleared its environment of [`MARKER_VARIABLE`]. Returns whether it took.
pub fn become_subreaper() -> bool {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes integers only.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// SIGKILLs and reaps every child of this process that is not an executor it still runs:
/// the orphans it adopted as a subreaper. Called when no executor runs any more (the end of
/// the command, or an interrupt after [`kill_every_group`]); waits (at most
/// [`ORPHANS_GONE_MS_MAX`]) until none is left. Returns how many it killed.
pub fn kill_orphans() -> usize {
    let Ok(own) = i32::try_from(std::process::id()) else { return 0 };
    let running: BTreeSet<i32> = running_groups().iter().filter_map(|g| i32::try_from(*g).ok()).collect();
    let deadline = std::time::Instant::now() + Duration::from_millis(ORPHANS_GONE_MS_MAX);
    let mut killed = BTreeSet::new();
    loop {
        let Ok(entries) = std::fs::read_dir("/proc") else { return killed.len() };
        let orphans: Vec<i32> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
            .filter(|pid| !running.contains(pid) && parent_of(*pid) == Some(own))
            .collect();
        if orphans.is_empty() || std::time::Instant::now() >= deadline {
            return killed.len();
        }
        for pid in orphans {
            // SAFETY: kill(2) takes two integers and touches no memory of ours.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            reap(pid);
            killed.insert(pid);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILLs every executor process group still running and waits (at most
/// [`GROUPS_GONE_MS_MAX`]) until no process of them is left, reaping the ones that are this
/// process's children; returns how many groups there were.
pub fn kill_every_group() -> usize {
    let groups = std::mem::take(&mut *running_groups());
    for pgid in &groups {
        let _ = signal_group(*pgid, "KILL");
    }
    let deadline = std::time::Instant::now() + Duration::from_millis(GROUPS_GONE_MS_MAX);
    let mut left: Vec<i32> = groups.iter().filter_map(|g| i32::try_from(*g).ok()).collect();
    while !left.is_empty() && std::time::Instant::now() < deadline {
        left.retain(|&group| {
            // SAFETY: waitpid and kill take integers and a null status pointer; no memory of
            // ours is touched. A killed child stays a zombie in its group until reaped.
            unsafe {
                while libc::waitpid(-group, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
                !(libc::kill(-group, 0) == -1
                    && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
            }
        });
        std::thread::sleep(Duration::from_millis(10));
    }
    groups.len()
}

/// Sends `signal` (`KILL`, `STOP`, `CONT`) to a process group.
pub fn signal_group(pgid: u32, signal: &str) -> Result<(), String> {
    let number = match signal {
        "KILL" => libc::SIGKILL,
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        other => return Err(format!("no signal SIG{other}")),
    };
    let group = i32::try_from(pgid).map_err(|_| format!("process group {pgid} is out of range"))?;
    // SAFETY: kill(2) takes two integers and touches no memory of ours; a negative pid names
    // the process group, which each process leads (it was spawned with `process_group(0)`).
    let rc = unsafe { libc::kill(-group, number) };
    if rc == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::ESRCH) {
        return Ok(()); // the whole group is gone already
    }
    Err(format!("kill(-{pgid}, SIG{signal}): {error}"))
}
