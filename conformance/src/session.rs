//! A session with one executor process, spoken to one request at a time with every line
//! checked (see [`runner::process`] for the framing shared with the live backend).

use super::*;

/// A reply to a request (or to a bad line), well-formed as far as the rules go.
pub(super) enum Reply {
    Ok { object: Map<String, Value>, line: String },
    Error { code: i64, line: String },
}

impl Reply {
    pub(super) fn line(&self) -> &str {
        match self {
            Reply::Ok { line, .. } | Reply::Error { line, .. } => line,
        }
    }
}

/// One process of the executor (see [`runner::process`]), spoken to one request at a time.
pub(super) struct Session {
    pub(super) process: Process,
    pub(super) out: mpsc::Receiver<Out>,
    pub(super) next_msg_id: u64,
}

impl Session {
    pub(super) fn start(command: &ExecutorCommand) -> Result<Session, String> {
        let (process, stdout) = Process::spawn(command, "check")?;
        let (tx, out) = mpsc::channel(QUEUED_LINES_MAX);
        tokio::spawn(process::read_lines(stdout, process.tag(), move |line| {
            let tx = tx.clone();
            // A closed receiver: the session is over.
            async move { tx.send(line).await.is_ok() }
        }));
        Ok(Session { process, out, next_msg_id: 1 })
    }

    /// The newest of its stderr, for a verdict.
    pub(super) async fn stderr_note(&mut self) -> String {
        let text = self.process.stderr_tail().await;
        let chars: Vec<char> = text.chars().collect();
        let start = chars.len().saturating_sub(STDERR_QUOTE_CHARS_MAX);
        let newest: String = chars[start..].iter().collect();
        let cut = if start > 0 { "…" } else { "" };
        format!(
            "stderr: {cut}{}",
            newest.replace(|c: char| c.is_control() && c != '\n', "?").replace('\n', " / ")
        )
    }

    /// Why stdout ended: the exit status if the process is gone within the bound.
    pub(super) async fn ended_note(&mut self) -> String {
        let exit = match self.process.ending().await {
            Ending::Exited(status) => format!("the process exited with {status}"),
            Ending::NoStatus(e) => format!("no exit status: {e}"),
            Ending::StillRunning => {
                format!("it closed stdout and did not exit within {} ms", process::EXIT_MS_MAX)
            }
        };
        format!("{exit}; {}", self.stderr_note().await)
    }

    /// Writes one line (a `\n` is added), within a bound.
    pub(super) async fn send_line(&mut self, line: &str) -> Result<(), String> {
        match self.process.write(&format!("{line}\n")).await {
            Ok(()) => Ok(()),
            Err(WriteError::Closed) => Err(format!("its stdin is closed ({})", self.ended_note().await)),
            Err(WriteError::Stuck) => Err(format!(
                "it did not read its stdin for {} ms; {}",
                process::WRITE_MS_MAX,
                self.stderr_note().await
            )),
        }
    }

    /// Sends a request of type `kind` and waits up to `bound_ms` for its reply.
    pub(super) async fn request(
        &mut self,
        kind: &str,
        mut fields: Value,
        bound_ms: u64,
    ) -> Result<Reply, String> {
        let msg_id = self.next_msg_id;
        self.next_msg_id += 1;
        if let Some(map) = fields.as_object_mut() {
            map.insert("type".into(), json!(kind));
            map.insert("msg_id".into(), json!(msg_id));
        }
        self.send_line(&fields.to_string()).await.map_err(|e| format!("{kind}: {e}"))?;
        self.reply(Some(msg_id), Some(kind), bound_ms).await.map_err(|e| format!("{kind}: {e}"))
    }

    /// The next reply, every line before it checked: events must be well-formed with a known
    /// state, and the reply must answer `reply_to` (`None`: a line without a msg_id, answered
    /// with `in_reply_to` null) with `<kind>_ok` or `error` (with a string `text`).
    pub(super) async fn reply(
        &mut self,
        reply_to: Option<u64>,
        kind: Option<&str>,
        bound_ms: u64,
    ) -> Result<Reply, String> {
        let deadline = Instant::now() + Duration::from_millis(bound_ms);
        loop {
            let out = match tokio::time::timeout_at(deadline, self.out.recv()).await {
                Err(_) => return Err(format!("no reply within {bound_ms} ms; {}", self.stderr_note().await)),
                Ok(None | Some(Out::End)) => {
                    return Err(format!("stdout ended before the reply ({})", self.ended_note().await));
                }
                Ok(Some(out)) => out,
            };
            let line = match out {
                Out::Line(line) => line,
                Out::TooLong | Out::End => return Err(process::too_long()),
                Out::Partial(fragment) => {
                    return Err(format!(
                        "half a line, then stdout ended: {} ({})",
                        excerpt(fragment.trim_end()),
                        self.ended_note().await
                    ));
                }
            };
            let text = line.trim();
            let (ty, in_reply_to, object) = match process::frame(text)? {
                None => continue,
                Some(Frame::Event { state, .. }) if known_state(&state) => continue,
                Some(Frame::Event { .. }) => {
                    return Err(format!(
                        "an event with a state the protocol does not know: {}",
                        excerpt(text)
                    ));
                }
                Some(Frame::Reply { kind, in_reply_to, object }) => (kind, in_reply_to, object),
            };
            let answers = match reply_to {
                Some(id) => in_reply_to.as_ref().and_then(Value::as_u64) == Some(id),
                None => in_reply_to.as_ref().is_none_or(Value::is_null),
            };
            if !answers {
                let want = reply_to.map_or("null".to_string(), |id| id.to_string());
                let got = in_reply_to.map_or("missing".to_string(), |v| v.to_string());
                return Err(format!(
                    "a reply with in_reply_to {got} where {want} was due: {}",
                    excerpt(text)
                ));
            }
            process::check_reply_type(&ty, &object, kind)?;
            if ty == "error" {
                if !object.get("text").is_some_and(Value::is_string) {
                    return Err(format!("an error without a string text: {}", excerpt(text)));
                }
                let code = object.get("code").and_then(Value::as_i64).unwrap_or_default();
                return Ok(Reply::Error { code, line: text.to_string() });
            }
            return Ok(Reply::Ok { object, line: text.to_string() });
        }
    }

    /// Stdout stays quiet for `ms`: any line then is one nobody asked for.
    pub(super) async fn quiet(&mut self, ms: u64) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_millis(ms);
        loop {
            match tokio::time::timeout_at(deadline, self.out.recv()).await {
                Err(_) | Ok(None | Some(Out::End)) => return Ok(()),
                Ok(Some(Out::Line(line))) if line.trim().is_empty() => {}
                Ok(Some(Out::Line(line) | Out::Partial(line))) => {
                    return Err(format!(
                        "a line after the last reply, with no request: {}",
                        excerpt(line.trim())
                    ));
                }
                Ok(Some(Out::TooLong)) => return Err(process::too_long()),
            }
        }
    }

    /// Waits up to `ms` for the process to exit by itself.
    pub(super) async fn exit_within(&mut self, ms: u64) -> Option<ExitStatus> {
        self.process.exit_within(ms).await
    }

    /// SIGKILL to the whole process group (a wrapper's children too), then reaps the leader.
    pub(super) async fn kill(mut self) {
        self.process.kill().await;
    }
}
