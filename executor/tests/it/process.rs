//! A real `twice-executor` child process, driven over its stdio protocol (`twice/1`).
//!
//! Every wait is bounded: a reply that does not come within its bound kills the child and
//! fails the test with the tail of its stderr. A child that dies while a request is out (the
//! crash tests make it die on purpose) is reported as [`Died`], not as a failure.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The longest a test waits for one reply (a drain asks for less than this).
pub const REPLY_WAIT: Duration = Duration::from_secs(30);
/// The longest a test waits for a child to exit once it should.
pub const EXIT_WAIT: Duration = Duration::from_secs(10);
/// How much of a child's stderr a failure shows.
const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// The path of one of the project's binaries: in `TWICE_BIN_DIR` (set by `cargo xtask test`),
/// or next to this test binary's `deps` directory (`target/debug`). Fails the test when
/// neither has it.
pub fn bin(name: &str) -> PathBuf {
    const HOW: &str = "run cargo xtask test (or cargo build --workspace --bins)";
    if let Some(dir) = std::env::var_os("TWICE_BIN_DIR") {
        let path = PathBuf::from(dir).join(name);
        assert!(path.is_file(), "TWICE_BIN_DIR has no {name} ({}): {HOW}", path.display());
        return path;
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("no current_exe ({e}): {HOW}"));
    // target/debug/deps/it-HASH → target/debug
    let candidate = exe.parent().and_then(Path::parent).map(|dir| dir.join(name));
    match candidate {
        Some(path) if path.is_file() => path,
        _ => panic!("no {name} binary next to {} and TWICE_BIN_DIR is unset: {HOW}", exe.display()),
    }
}

/// A fresh, empty directory for one test's state, under cargo's per-target temp dir.
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("executor-it").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// The process ended while the test was talking to it.
#[derive(Debug)]
pub struct Died {
    pub status: ExitStatus,
    pub stderr: String,
}

impl Died {
    /// Whether SIGKILL ended it.
    pub fn by_sigkill(&self) -> bool {
        use std::os::unix::process::ExitStatusExt as _;
        self.status.signal() == Some(libc::SIGKILL)
    }
}

/// One `twice-executor` process.
pub struct ExecutorProcess {
    label: String,
    child: Child,
    pid: i32,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<Vec<u8>>>,
    next_msg_id: u64,
    /// `event` lines seen so far, in order.
    pub events: Vec<Value>,
    exited: Option<ExitStatus>,
}

impl ExecutorProcess {
    /// Starts `twice-executor ARGS` with extra environment `env`; `label` names it in failures.
    pub fn spawn(label: &str, args: &[&str], env: &[(&str, &str)]) -> ExecutorProcess {
        ExecutorProcess::spawn_program(label, &bin("twice-executor"), args, env)
    }

    /// Starts any executor, `PROGRAM ARGS`, with extra environment `env`.
    pub fn spawn_program(label: &str, path: &Path, args: &[&str], env: &[(&str, &str)]) -> ExecutorProcess {
        let mut command = Command::new(path);
        command
            .args(args)
            .env_remove("TWICE_EXECUTOR_KILL_AT")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", path.display()));
        let pid = child.id().expect("a fresh child has a pid") as i32;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stderr_pipe = child.stderr.take().expect("piped stderr");
        tokio::spawn(collect_tail(stderr_pipe, Arc::clone(&stderr)));
        ExecutorProcess {
            label: label.to_string(),
            child,
            pid,
            stdin,
            stdout,
            stderr,
            next_msg_id: 1,
            events: Vec::new(),
            exited: None,
        }
    }

    /// The last few KiB the process wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// Kills the child and fails the test, with what it said on stderr.
    fn fail(&mut self, why: &str) -> ! {
        let _ = self.child.start_kill();
        panic!(
            "executor {} (pid {}): {why}\n--- stderr tail ---\n{}",
            self.label,
            self.pid,
            self.stderr_tail()
        );
    }

    /// Writes raw bytes to stdin; `Err` if the process is gone (broken pipe).
    pub async fn write_raw(&mut self, bytes: &[u8]) -> Result<(), Died> {
        let Some(stdin) = self.stdin.as_mut() else { self.fail("stdin is already closed") };
        let write = async {
            stdin.write_all(bytes).await?;
            stdin.flush().await
        };
        match tokio::time::timeout(REPLY_WAIT, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(self.died().await),
            Err(_) => self.fail(&format!("writing {} bytes to stdin took over {REPLY_WAIT:?}", bytes.len())),
        }
    }

    /// Sends one request line with the next `msg_id`; returns the id.
    pub async fn send(&mut self, mut request: Value) -> Result<u64, Died> {
        let id = self.next_msg_id;
        self.next_msg_id += 1;
        request["msg_id"] = json!(id);
        let mut line = request.to_string();
        line.push('\n');
        self.write_raw(line.as_bytes()).await.map(|()| id)
    }

    /// The next line that is not an `event`, within `wait`. A line that is not a JSON object
    /// fails the test: the protocol promises JSON lines on stdout.
    pub async fn next_reply(&mut self, wait: Duration) -> Result<Value, Died> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut line = Vec::new();
            let read = tokio::time::timeout_at(deadline, self.stdout.read_until(b'\n', &mut line)).await;
            match read {
                Err(_) => self.fail(&format!("no reply within {wait:?}")),
                Ok(Err(e)) => self.fail(&format!("reading stdout: {e}")),
                Ok(Ok(0)) => return Err(self.died().await),
                Ok(Ok(_)) => {}
            }
            let text = String::from_utf8_lossy(&line);
            if !line.ends_with(b"\n") {
                // A partial last line: the process died mid-write.
                return Err(self.died().await);
            }
            let value: Value = match serde_json::from_str(text.trim()) {
                Ok(v @ Value::Object(_)) => v,
                _ => self.fail(&format!("not a JSON object on stdout: {text:?}")),
            };
            if value["type"] == "event" {
                self.events.push(value);
                continue;
            }
            return Ok(value);
        }
    }

    /// Sends `request` and waits for its reply (`*_ok` or `error`), skipping events.
    pub async fn request(&mut self, request: Value, wait: Duration) -> Result<Value, Died> {
        let id = self.send(request).await?;
        let reply = self.next_reply(wait).await?;
        if reply["in_reply_to"] != json!(id) {
            self.fail(&format!("a reply to msg_id {id} was expected, got {reply}"));
        }
        Ok(reply)
    }

    /// Like [`Self::request`], failing the test if the process dies.
    pub async fn call(&mut self, request: Value) -> Value {
        let kind = request["type"].clone();
        match self.request(request, REPLY_WAIT).await {
            Ok(reply) => reply,
            Err(died) => self.fail(&format!("died ({}) during a {kind} request", died.status)),
        }
    }

    /// Like [`Self::call`], failing the test unless the reply is `<type>_ok`.
    pub async fn ok(&mut self, request: Value) -> Value {
        let want = format!("{}_ok", request["type"].as_str().unwrap_or_default());
        let shown = request.to_string().chars().take(300).collect::<String>();
        let reply = self.call(request).await;
        if reply["type"] != want.as_str() {
            self.fail(&format!("{shown} got {reply}, not {want}"));
        }
        reply
    }

    /// Sends a signal (SIGKILL, SIGSTOP, SIGCONT, ...) to the process.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(self.pid, signal) };
        assert!(
            rc == 0 || self.exited.is_some(),
            "kill({}, {signal}): {}",
            self.pid,
            std::io::Error::last_os_error()
        );
    }

    /// SIGKILL, then waits (bounded) for the process to be gone.
    pub async fn kill(&mut self) -> ExitStatus {
        if self.exited.is_none() {
            self.signal(libc::SIGKILL);
        }
        self.wait_exit(EXIT_WAIT).await
    }

    /// Whether the process has exited (reaping it if so), without waiting.
    // The soak of the workspace's tests (tests/it/soak.rs, which includes this file) uses it.
    #[allow(dead_code)]
    pub fn has_exited(&mut self) -> bool {
        if self.exited.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.exited = Some(status);
        }
        self.exited.is_some()
    }

    /// Closes stdin (end of input for the executor).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the process to exit, within `wait`.
    pub async fn wait_exit(&mut self, wait: Duration) -> ExitStatus {
        if let Some(status) = self.exited {
            return status;
        }
        match tokio::time::timeout(wait, self.child.wait()).await {
            Ok(Ok(status)) => {
                self.exited = Some(status);
                status
            }
            Ok(Err(e)) => self.fail(&format!("waiting for exit: {e}")),
            Err(_) => self.fail(&format!("did not exit within {wait:?}")),
        }
    }

    async fn died(&mut self) -> Died {
        let status = self.wait_exit(EXIT_WAIT).await;
        // Let the stderr collector read what is left in the pipe.
        tokio::time::sleep(Duration::from_millis(5)).await;
        Died { status, stderr: self.stderr_tail() }
    }
}

/// Keeps the last [`STDERR_TAIL_BYTES`] of a pipe.
async fn collect_tail(mut pipe: impl AsyncRead + Unpin, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > STDERR_TAIL_BYTES {
            let cut = tail.len() - STDERR_TAIL_BYTES;
            tail.drain(..cut);
        }
    }
}

/// A small seeded RNG (xorshift64*): the same seed gives the same run of choices.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        XorShift(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}
