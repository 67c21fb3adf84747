//! What the MCP client tests share: `twice mcp` and `twice serve` as child processes, spoken
//! to line by line, and HTTP by hand, one exchange per connection, de-chunked.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::process::bin;

/// The longest a process may take to exit once asked (stdin closed, or SIGTERM).
pub(super) const EXIT_WAIT: Duration = Duration::from_secs(15);
/// The longest one answer on stdio or one HTTP exchange may take.
pub(super) const ANSWER_WAIT: Duration = Duration::from_secs(20);
/// How long `twice serve` may take to write its URLs file.
pub(super) const READY_WAIT: Duration = Duration::from_secs(30);
/// How often something awaited is looked at.
const POLL: Duration = Duration::from_millis(25);

/// The headers of a streamable HTTP request: JSON in, JSON or an event stream out; the
/// session and protocol version once there are.
pub(super) fn mcp_headers(session: Option<&str>, version: Option<&str>) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("Accept", "application/json, text/event-stream".into()),
    ];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session.to_string()));
    }
    if let Some(version) = version {
        headers.push(("MCP-Protocol-Version", version.to_string()));
    }
    headers
}

/// The JSON-RPC message with `id` in an answer's event stream (or its JSON body).
pub(super) fn sse_reply(answer: &Answer, id: u64) -> Value {
    let text = answer.text();
    let direct = serde_json::from_str::<Value>(&text).ok().into_iter();
    let events = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok());
    direct
        .chain(events)
        .find(|message: &Value| message["id"] == id)
        .unwrap_or_else(|| panic!("no reply {id} in:\n{text}"))
}

// ---------------------------------------------------------------------------------------------
// Processes.

pub(super) fn twice() -> String {
    path(&bin("twice"))
}

pub(super) fn path(path: &Path) -> String {
    path.to_str().expect("a UTF-8 path").to_string()
}

/// A fresh directory for one test, under cargo's per-target temp dir.
pub(super) fn fresh(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-clients").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// `twice mcp --scenario SCENARIO --urls-file DIR/urls.json`, its stdin and stdout ours.
pub(super) fn twice_mcp(dir: &Path, scenario: &str) -> Proc {
    twice_mcp_with(dir, scenario, &[])
}

/// [`twice_mcp`] with more options (`--mcp-port 0`: streamable HTTP too, on the same world).
pub(super) fn twice_mcp_with(dir: &Path, scenario: &str, options: &[&str]) -> Proc {
    let mut command = Command::new(bin("twice"));
    command.args(["mcp", "--scenario", scenario, "--urls-file"]).arg(dir.join("urls.json")).args(options);
    Proc::spawn(command, dir, "twice-mcp")
}

/// A child process with its stdin, its stdout read line by line, its stderr in a file; killed
/// and reaped when dropped.
pub(super) struct Proc {
    pub(super) shown: String,
    pub(super) child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr_path: PathBuf,
}

impl Proc {
    pub(super) fn spawn(mut command: Command, dir: &Path, label: &str) -> Proc {
        let shown = format!("{command:?}");
        let stderr_path = dir.join(format!("{label}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).expect("the stderr file can be created");
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr);
        let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Proc { shown, child, stdin, lines, stderr_path }
    }

    /// The next line of stdout; `None` once stdout has closed. Fails after `within`.
    pub(super) fn next_line(&mut self, within: Duration) -> Option<String> {
        match self.lines.recv_timeout(within) {
            Ok(line) => Some(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("{}: no line within {within:?}; stderr:\n{}", self.shown, self.stderr())
            }
        }
    }

    /// The next line of stdout, which must come.
    pub(super) fn line(&mut self, within: Duration) -> String {
        self.next_line(within).unwrap_or_else(|| {
            let status = self.child.try_wait().ok().flatten();
            panic!("{}: stdout closed ({status:?}); stderr:\n{}", self.shown, self.stderr())
        })
    }

    /// The next line of stdout as JSON.
    pub(super) fn reply(&mut self, within: Duration) -> Value {
        let line = self.line(within);
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{}: a line that is no JSON ({e}): {line}", self.shown))
    }

    pub(super) fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(format!("{line}\n").as_bytes()).expect("the line can be written");
        stdin.flush().expect("stdin can be flushed");
    }

    /// Writes a line too long for a pipe's buffer from another thread, so that a reader that
    /// stopped reading fails the test rather than hanging it.
    pub(super) fn send_long(&mut self, line: String) {
        let mut stdin = self.stdin.take().expect("stdin is open");
        let (done_tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            let written = stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.write_all(b"\n"))
                .and_then(|()| stdin.flush());
            let _ = done_tx.send((written.map_err(|e| e.to_string()), stdin));
        });
        let (written, stdin) = done
            .recv_timeout(ANSWER_WAIT)
            .unwrap_or_else(|_| panic!("{}: a long line was not read within {ANSWER_WAIT:?}", self.shown));
        written.unwrap_or_else(|e| panic!("{}: the long line could not be written: {e}", self.shown));
        self.stdin = Some(stdin);
    }

    /// The handshake: initialize (as request `id`) and the initialized notification.
    pub(super) fn initialize(&mut self, id: u64) -> Value {
        let initialize = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
        self.send(&initialize.to_string());
        let reply = self.reply(ANSWER_WAIT);
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["result"]["protocolVersion"], "2025-11-25", "{reply}");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        reply
    }

    pub(super) fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// Waits for the process to exit; kills it and fails after `within`.
    pub(super) fn wait(&mut self, within: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("the status can be read") {
                return status;
            }
            if started.elapsed() > within {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{} did not exit within {within:?}; stderr:\n{}", self.shown, self.stderr());
            }
            std::thread::sleep(POLL);
        }
    }

    pub(super) fn stderr(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let start = text.len().saturating_sub(16 * 1024);
        let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text[start..].to_string()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// `twice serve --mcp-port 0 --scenario SCENARIO --urls-file DIR/serve-urls.json`, ready.
pub(super) struct Serve {
    process: Proc,
    pub(super) urls_file: PathBuf,
    urls: BTreeMap<String, String>,
}

impl Serve {
    pub(super) fn start(dir: &Path, scenario: &str) -> Serve {
        let urls_file = dir.join("serve-urls.json");
        let mut command = Command::new(bin("twice"));
        command.args(["serve", "--mcp-port", "0", "--scenario", scenario, "--urls-file"]).arg(&urls_file);
        let process = Proc::spawn(command, dir, "twice-serve");
        let urls = read_urls(&urls_file, READY_WAIT);
        let urls = urls
            .as_object()
            .expect("the URLs file holds an object")
            .iter()
            // The string entries are URLs; `accounts` lists the funded dev accounts.
            .filter_map(|(name, url)| Some((name.clone(), url.as_str()?.to_string())))
            .collect();
        Serve { process, urls_file, urls }
    }

    pub(super) fn url(&self, name: &str) -> &str {
        self.urls.get(name).unwrap_or_else(|| panic!("no {name} in {:?}", self.urls))
    }

    /// SIGTERM, and a clean exit within [`EXIT_WAIT`].
    pub(super) fn stop(mut self) {
        let pid = libc::pid_t::try_from(self.process.child.id()).expect("a pid");
        // SAFETY: a signal to our own child, which has not been reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = self.process.wait(EXIT_WAIT);
        assert!(status.success(), "twice serve exited with {status}:\n{}", self.process.stderr());
    }
}

/// The URLs file once it is there (serve writes it whole, then renames it into place).
pub(super) fn read_urls(file: &Path, within: Duration) -> Value {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            return serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: no JSON ({e}): {text}", file.display()));
        }
        assert!(started.elapsed() < within, "no {} within {within:?}", file.display());
        std::thread::sleep(POLL);
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP, by hand: one exchange per connection.

/// An answer: status, headers (lowercase names) and the whole body, de-chunked.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

impl Answer {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub(super) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `http://host:port/path` → (`http://host:port`, `/path`).
pub(super) fn split_url(url: &str) -> (&str, &str) {
    let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("not an http URL: {url}"));
    let at = rest.find('/').map_or(url.len(), |i| i + "http://".len());
    (&url[..at], if at < url.len() { &url[at..] } else { "/" })
}

/// Opens a connection to `base` and writes one request on it (`Connection: close`).
pub(super) fn send_request(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> TcpStream {
    let host = base.strip_prefix("http://").unwrap_or_else(|| panic!("not an http URL: {base}"));
    let mut stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("cannot connect to {host}: {e}"));
    stream.set_read_timeout(Some(ANSWER_WAIT)).expect("a read timeout");
    stream.set_write_timeout(Some(ANSWER_WAIT)).expect("a write timeout");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .expect("the request can be written");
    stream
}

/// One exchange, read to the end of the connection within [`ANSWER_WAIT`].
pub(super) fn http(base: &str, method: &str, path: &str, headers: &[(&str, String)], body: &[u8]) -> Answer {
    read_answer(send_request(base, method, path, headers, body), &format!("{method} {base}{path}"))
}

/// The answer on `stream` (the exchange `what`), read to the connection's end within
/// [`ANSWER_WAIT`].
pub(super) fn read_answer(mut stream: TcpStream, what: &str) -> Answer {
    let started = Instant::now();
    let mut raw = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
            Err(e) => panic!("{what}: {e} after {:?}, with {} bytes", started.elapsed(), raw.len()),
        }
        assert!(started.elapsed() < ANSWER_WAIT, "{what}: no end within {ANSWER_WAIT:?}");
    }
    parse_answer(&raw).unwrap_or_else(|| panic!("{what}: no HTTP answer: {}", String::from_utf8_lossy(&raw)))
}

pub(super) fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        body = dechunk(&body)?;
    }
    Some(Answer { status, headers, body })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&rest[..line_end]).ok()?.split(';').next()?.trim().to_string();
        let size = usize::from_str_radix(&size, 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// `GET base+path` as JSON; a status other than 200 fails.
pub(super) fn get_json(base: &str, path: &str) -> Value {
    let answer = http(base, "GET", path, &[], b"");
    assert_eq!(answer.status, 200, "GET {base}{path}: {}", answer.text());
    serde_json::from_slice(&answer.body)
        .unwrap_or_else(|e| panic!("GET {base}{path}: no JSON ({e}): {}", answer.text()))
}

/// The journal entries of one method and path, oldest first.
pub(super) fn requests<'a>(journal: &'a Value, method: &str, path: &str) -> Vec<&'a Value> {
    let entries = journal["entries"].as_array().map(Vec::as_slice).unwrap_or_default();
    entries.iter().filter(|e| e["method"] == method && e["path"] == path).collect()
}

/// Waits until the fake's journal holds a request of `method` and `path`.
pub(super) fn wait_for_request(base: &str, method: &str, path: &str) {
    let started = Instant::now();
    while requests(&get_json(base, "/__twice/journal"), method, path).is_empty() {
        assert!(started.elapsed() < ANSWER_WAIT, "no {method} {path} reached {base} within {ANSWER_WAIT:?}");
        std::thread::sleep(POLL);
    }
}
