//! The `twice` binary as a user runs it: a real child process, real signals, real sockets.

mod catalog;
mod conformance;
mod live;
mod logs;
mod mcp;
mod misbehave;
mod reports;
mod serve;
mod serve_replay;
mod serve_settle;
mod serve_world;
mod sim;
mod timeline;
mod webhooks;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT_MS_MAX: u64 = 30_000;

fn twice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_twice"))
}

/// Waits for a child to exit, killing it if it outlives the bound.
fn wait_bounded(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

fn read_urls(path: &Path, child: &mut Child) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(urls) = serde_json::from_str(&text)
        {
            return urls;
        }
        assert!(child.try_wait().unwrap().is_none(), "twice serve exited early");
        assert!(Instant::now() < deadline, "no URLs file within {WAIT_MS_MAX} ms");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn get(url: &str, path: &str) -> String {
    let addr = url.strip_prefix("http://").unwrap();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_millis(WAIT_MS_MAX))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    out
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
}

#[test]
fn serve_prints_urls_answers_and_stops_cleanly_on_signals() {
    for stop_signal in ["TERM", "INT"] {
        let dir = std::env::temp_dir().join(format!("twice-serve-{}-{stop_signal}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let urls_file = dir.join("urls.json");
        let _ = std::fs::remove_file(&urls_file);
        let mut child = twice()
            .args(["serve", "--seed", "5", "--urls-file"])
            .arg(&urls_file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let urls = read_urls(&urls_file, &mut child);
        for service in ["payments", "workspaces"] {
            let url = urls[service].as_str().unwrap();
            assert!(url.starts_with("http://127.0.0.1:"), "loopback by default: {url}");
            let health = get(url, "/__twice/health");
            assert!(health.starts_with("HTTP/1.1 200") && health.contains(service), "{health}");
        }
        signal(&child, stop_signal);
        assert_eq!(wait_bounded(&mut child), Some(0), "clean exit on SIG{stop_signal}");
        let mut stdout = String::new();
        child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
        assert!(stdout.contains(urls["payments"].as_str().unwrap()), "URLs are printed: {stdout}");
        assert!(stdout.contains("stopped"), "{stdout}");
    }
}

#[test]
fn a_port_in_use_is_a_harness_error_with_a_hint() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let mut child = twice()
        .args(["serve", "--payments-port", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(wait_bounded(&mut child), Some(2));
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(stderr.contains(&format!("cannot listen on 127.0.0.1:{port}")), "{stderr}");
}

/// Every listener serve opens by default (each fake and the control endpoint) is on loopback.
#[test]
fn every_default_listener_is_on_loopback() {
    let dir = std::env::temp_dir().join(format!("twice-serve-loopback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let urls_file = dir.join("urls.json");
    let _ = std::fs::remove_file(&urls_file);
    let mut child = twice()
        .args(["serve", "--urls-file"])
        .arg(&urls_file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let urls = read_urls(&urls_file, &mut child);
    let urls = urls.as_object().unwrap();
    for name in ["payments", "workspaces", "files", "chain", "messages", "control"] {
        let url = urls[name].as_str().unwrap();
        assert!(url.starts_with("http://127.0.0.1:"), "{name} on loopback: {url}");
    }
    let listeners = urls.values().filter(|v| v.is_string()).count();
    assert_eq!(listeners, 6, "no other listener: {urls:?}");
    assert!(urls["accounts"].is_array(), "the dev accounts beside the URLs: {urls:?}");
    signal(&child, "TERM");
    assert_eq!(wait_bounded(&mut child), Some(0));
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(!stderr.contains("no authentication"), "no warning on loopback: {stderr}");
}

/// An address beyond loopback needs `--allow-remote`: without it, a usage error (exit 2) that
/// says why and what to add; with it, serve listens and warns on stderr that the control API
/// has no authentication.
#[test]
fn binding_beyond_loopback_needs_allow_remote_and_warns() {
    let out = twice().args(["serve", "--bind", "0.0.0.0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--bind 0.0.0.0 is beyond loopback")
            && stderr.contains("no authentication")
            && stderr.contains("--allow-remote"),
        "{stderr}"
    );

    let dir = std::env::temp_dir().join(format!("twice-serve-remote-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let urls_file = dir.join("urls.json");
    let _ = std::fs::remove_file(&urls_file);
    let mut child = twice()
        .args(["serve", "--bind", "0.0.0.0", "--allow-remote", "--urls-file"])
        .arg(&urls_file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let urls = read_urls(&urls_file, &mut child);
    assert!(urls["payments"].as_str().unwrap().starts_with("http://0.0.0.0:"), "{urls}");
    signal(&child, "TERM");
    assert_eq!(wait_bounded(&mut child), Some(0));
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(
        stderr.contains("warning: listening on 0.0.0.0")
            && stderr.contains("(/__twice/*) has no authentication"),
        "{stderr}"
    );
}

#[test]
fn unknown_arguments_are_refused_with_usage() {
    let out = twice().args(["serve", "--bnd", "0.0.0.0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--bind"), "clap suggests the flag: {stderr}");
}

/// Process events signal the executor's process group directly (kill(2) on the group), so a
/// pause works where no `kill` program is on `PATH`, as in a minimal container image: the
/// replay's timeline shows the pause and the SIGCONT that ends it, and the scenario holds.
#[test]
fn sigstop_and_sigcont_need_no_kill_program() {
    let dir = std::env::temp_dir().join(format!("twice-no-kill-{}", std::process::id()));
    let empty_path = dir.join("empty-path");
    std::fs::create_dir_all(&empty_path).unwrap();
    let scenario =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/catalog/files_stale_worker_overwrite.toml");
    let mut child = twice()
        .args(["replay", "--live"])
        .arg(&scenario)
        .arg("--report-dir")
        .arg(dir.join("report"))
        .env("PATH", &empty_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let code = wait_bounded(&mut child);
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut out).unwrap();
    assert_eq!(code, Some(0), "{out}");
    let line = |word: &str| out.lines().any(|l| l.contains(" w1 ") && l.contains(word));
    assert!(line("pause") && line("SIGCONT"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every process (its pid and command line) whose environment holds `variable`, from the
/// process table: the processes a run started inherit the environment it was given.
fn processes_with(variable: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if environ.split(|b| *b == 0).any(|v| v == variable.as_bytes()) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// Ctrl-C (or a cancelled CI job's SIGTERM) in the middle of a live run: the executors, each
/// in a process group of its own out of the terminal's reach, are killed, the work directory
/// is removed, and `twice` exits 130 (143).
#[test]
fn an_interrupted_run_leaves_no_executor_and_no_work_directory() {
    for (signal_name, code) in [("INT", 130), ("TERM", 143)] {
        let tmp = std::env::temp_dir().join(format!("twice-interrupt-{}-{signal_name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let mut child = twice()
            .args(["run", "--live", "--scenario", "files_stale_worker_overwrite", "--report-dir"])
            .arg(tmp.join("report"))
            .env("TMPDIR", &tmp)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Running: its work directory exists and an executor works in it.
        let marker = format!("TMPDIR={}", tmp.display());
        let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
        let work_dir = loop {
            let work = std::fs::read_dir(&tmp)
                .unwrap()
                .flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with("twice-run-"));
            let executors =
                processes_with(&marker).into_iter().filter(|p| p.contains("twice-executor")).count();
            if let Some(work) = work.filter(|_| executors > 0) {
                break work.path();
            }
            assert!(child.try_wait().unwrap().is_none(), "the run ended before it could be interrupted");
            assert!(Instant::now() < deadline, "no executor running within {WAIT_MS_MAX} ms");
            std::thread::sleep(Duration::from_millis(20));
        };
        signal(&child, signal_name);
        assert_eq!(wait_bounded(&mut child), Some(code));
        let mut stderr = String::new();
        child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
        assert!(stderr.contains("twice: interrupted"), "{stderr}");
        assert!(!work_dir.exists(), "{} is left behind", work_dir.display());
        let left = processes_with(&marker);
        assert!(left.is_empty(), "processes of the run are left: {left:?}");
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
