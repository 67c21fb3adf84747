//! The checks: one short session per rule, each on its own state directory, against the
//! fakes on loopback.

use super::*;

/// What every check shares: the command, the fakes' services and one sample intent per action.
pub(super) struct Probe<'a> {
    pub(super) command: &'a ExecutorCommand,
    pub(super) dir: PathBuf,
    pub(super) services: BTreeMap<String, vocabulary::protocol::Service>,
    pub(super) samples: Vec<IntentSpec>,
}

/// The scenario the checks' fakes are prepared for: one intent per action, whose parameters
/// the samples reuse, so that a refund has its payment intent, a put its bucket and a transfer
/// its funded account.
pub(super) fn fixture() -> Result<Scenario, serde_json::Error> {
    serde_json::from_value(json!({
        "name": "conformance",
        "intents": [
            {"id": "probe-refund", "action": "payments.refund",
             "params": {"payment_intent": "pi_conformance", "amount": 100}},
            {"id": "probe-workspace", "action": "workspaces.create",
             "params": {"external_id": "ws-conformance", "name": "Conformance"}},
            {"id": "probe-file", "action": "files.put",
             "params": {"bucket": "conformance", "key": "probe.txt", "body": "twice"}},
            {"id": "probe-transfer", "action": "chain.transfer",
             "params": {"to": format!("0x{:0>40}", "c0de"), "value": "1000"}},
            {"id": "probe-message", "action": "messages.send",
             "params": {"to": "conformance@example.com", "subject": "Conformance", "body": "twice"}},
        ],
    }))
}

impl Probe<'_> {
    pub(super) fn state_dir(&self, rule: &Rule) -> Result<PathBuf, String> {
        let dir = self.dir.join(rule.name).join("state");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("the harness cannot create {}: {e}", dir.display()))?;
        Ok(dir)
    }

    pub(super) fn init(&self, state_dir: &Path) -> Value {
        json!({
            "protocol": vocabulary::protocol::PROTOCOL,
            "worker_id": WORKER,
            "state_dir": state_dir,
            "services": self.services,
            "secrets": vocabulary::protocol::secrets(),
            "limits": setup::limits(),
        })
    }

    /// An intent with id `id` for the first announced action that has a sample.
    pub(super) fn sample(&self, init: &Init, id: &str) -> Option<Value> {
        let spec = self.samples.iter().find(|s| init.supports(&s.action))?;
        Some(json!({"id": id, "action": spec.action, "params": spec.params}))
    }

    /// A new process, answered `init` with `init_ok`.
    pub(super) async fn start_and_init(&self, state_dir: &Path) -> Result<Session, String> {
        let mut session = Session::start(self.command)?;
        match session.request("init", self.init(state_dir), INIT_MS_MAX).await {
            Ok(Reply::Ok { .. }) => Ok(session),
            Ok(Reply::Error { code, line, .. }) => {
                session.kill().await;
                Err(format!("init was refused with code {code}: {}", excerpt(&line)))
            }
            Err(e) => {
                session.kill().await;
                Err(e)
            }
        }
    }
}

pub(super) fn unsupported_note() -> String {
    let known = vocabulary::ACTION_NAMES.join(", ");
    format!("the executor announced none of the actions this rule can propose ({known})")
}

pub(super) async fn init_answered(probe: &Probe<'_>) -> (Checked, Init) {
    let state_dir = match probe.state_dir(&INIT_ANSWERED) {
        Ok(dir) => dir,
        Err(e) => return (Err(e), Init::default()),
    };
    let mut session = match Session::start(probe.command) {
        Ok(s) => s,
        Err(e) => return (Err(e), Init::default()),
    };
    let reply = session.request("init", probe.init(&state_dir), INIT_MS_MAX).await;
    session.kill().await;
    match reply {
        Err(e) => (Err(e), Init::default()),
        Ok(Reply::Error { code, line, .. }) => {
            (Err(format!("an error instead of init_ok, code {code}: {}", excerpt(&line))), Init::default())
        }
        Ok(Reply::Ok { object, line }) => {
            let init = Init::of(&object);
            let checked = match init_ok_problem(&object) {
                Some(why) => Err(format!("{why}: {}", excerpt(&line))),
                None => Ok(format!(
                    "init_ok within {INIT_MS_MAX} ms: {} {}, actions: {}",
                    init.name.as_deref().unwrap_or("?"),
                    init.version.as_deref().unwrap_or("?"),
                    if init.actions.is_empty() {
                        "none".to_string()
                    } else {
                        plain(&init.actions.join(", "))
                    }
                )),
            };
            (checked, init)
        }
    }
}

/// An intent view (§6) as far as the rules need it: a string id (`id` if given) and a known
/// state.
pub(super) fn intent_view(view: Option<&Value>, id: Option<&str>) -> Result<(), String> {
    let view = view.and_then(Value::as_object).ok_or("no intent object")?;
    let got = view.get("id").and_then(Value::as_str).ok_or("an intent without a string id")?;
    if id.is_some_and(|id| id != got) {
        return Err(format!("an intent with id {got:?}, not the one proposed"));
    }
    match view.get("state").and_then(Value::as_str) {
        Some(state) if known_state(state) => Ok(()),
        _ => Err(format!("intent {got:?} without a known state")),
    }
}

pub(super) fn status_views(reply: &Reply) -> Result<Vec<(String, String)>, String> {
    let Reply::Ok { object, line } = reply else { return Ok(Vec::new()) };
    let intents = object
        .get("intents")
        .and_then(Value::as_array)
        .ok_or(format!("a status_ok without an intents list: {}", excerpt(line)))?;
    intents
        .iter()
        .map(|view| {
            intent_view(Some(view), None)
                .map_err(|why| format!("status_ok with {why}: {}", excerpt(line)))?;
            let field = |name: &str| view.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
            Ok((field("id"), field("state")))
        })
        .collect()
}

pub(super) async fn replies_well_formed(probe: &Probe<'_>, init: &Init) -> Checked {
    let state_dir = probe.state_dir(&REPLIES_WELL_FORMED)?;
    let mut session = probe.start_and_init(&state_dir).await?;
    let checked = replies_session(&mut session, probe, init).await;
    session.kill().await;
    checked
}

pub(super) async fn replies_session(session: &mut Session, probe: &Probe<'_>, init: &Init) -> Checked {
    const ID: &str = "replies-well-formed-1";
    let mut asked = vec!["init"];
    if let Some(intent) = probe.sample(init, ID) {
        // The same intent twice: `propose` is idempotent by id (§3.2), and both replies count.
        for _ in 0..2 {
            let reply = session.request("propose", json!({"intent": intent}), REPLY_MS_MAX).await?;
            if let Reply::Ok { object, line } = &reply {
                intent_view(object.get("intent"), Some(ID))
                    .map_err(|why| format!("propose: a propose_ok with {why}: {}", excerpt(line)))?;
            }
            asked.push("propose");
        }
    }
    let reply = session.request("status", json!({}), REPLY_MS_MAX).await?;
    status_views(&reply)?;
    let reply = session.request("status", json!({"ids": [ID, "never-proposed"]}), REPLY_MS_MAX).await?;
    status_views(&reply)?;
    asked.extend(["status", "status"]);
    session.request("reconcile", json!({}), REPLY_MS_MAX).await?;
    asked.push("reconcile");
    let drain = json!({"timeout_ms": PROBE_DRAIN_MS});
    session.request("drain", drain, PROBE_DRAIN_MS + DRAIN_REPLY_SLACK_MS).await?;
    asked.push("drain");
    session.quiet(QUIET_MS).await?;
    Ok(format!("{} requests ({}), every line well-formed", asked.len(), asked.join(", ")))
}

/// Lines that are no request: not JSON, not an object, and an object without a msg_id.
pub const BAD_LINES: [&str; 3] = ["this is not json", "[1, 2, 3]", r#"{"type": "status"}"#];

pub(super) async fn bad_line_code_12(probe: &Probe<'_>) -> Checked {
    let state_dir = probe.state_dir(&BAD_LINE_CODE_12)?;
    let mut session = probe.start_and_init(&state_dir).await?;
    let checked = bad_line_session(&mut session).await;
    session.kill().await;
    checked
}

pub(super) async fn bad_line_session(session: &mut Session) -> Checked {
    for bad in BAD_LINES {
        session.send_line(bad).await.map_err(|e| format!("writing {bad:?}: {e}"))?;
        match session.reply(None, None, REPLY_MS_MAX).await {
            Ok(Reply::Error { code: 12, .. }) => {}
            Ok(reply) => {
                return Err(format!("{bad:?} was answered with {}", excerpt(reply.line())));
            }
            Err(e) => return Err(format!("after {bad:?}: {e}")),
        }
    }
    match session.request("status", json!({}), REPLY_MS_MAX).await {
        Ok(Reply::Ok { .. }) => {
            Ok(format!("code 12 to each of {} bad lines, then status_ok", BAD_LINES.len()))
        }
        Ok(reply) => Err(format!("after the bad lines, status got {}", excerpt(reply.line()))),
        Err(e) => Err(format!("after the bad lines, it stopped serving: {e}")),
    }
}

pub(super) async fn unknown_type_code_10(probe: &Probe<'_>) -> Checked {
    let state_dir = probe.state_dir(&UNKNOWN_TYPE_CODE_10)?;
    let mut session = Session::start(probe.command)?;
    let checked = unknown_type_session(&mut session, probe, &state_dir).await;
    session.kill().await;
    checked
}

pub(super) async fn teleport(session: &mut Session, when: &str) -> Result<(), String> {
    match session.request("teleport", json!({}), REPLY_MS_MAX).await {
        Ok(Reply::Error { code: 10, .. }) => Ok(()),
        Ok(reply) => Err(format!("a teleport {when} was answered with {}", excerpt(reply.line()))),
        Err(e) => Err(format!("{e} (a teleport {when})")),
    }
}

pub(super) async fn unknown_type_session(
    session: &mut Session,
    probe: &Probe<'_>,
    state_dir: &Path,
) -> Checked {
    teleport(session, "before init").await?;
    match session.request("init", probe.init(state_dir), INIT_MS_MAX).await? {
        Reply::Ok { .. } => {}
        Reply::Error { line, .. } => {
            return Err(format!("init after a teleport was refused: {}", excerpt(&line)));
        }
    }
    teleport(session, "after init").await?;
    match session.request("status", json!({}), REPLY_MS_MAX).await? {
        Reply::Ok { .. } => Ok("code 10 before and after init, then status_ok".into()),
        reply => Err(format!("after the teleports, status got {}", excerpt(reply.line()))),
    }
}

pub(super) async fn unknown_action_refused(probe: &Probe<'_>, init: &Init) -> Checked {
    let state_dir = probe.state_dir(&UNKNOWN_ACTION_REFUSED)?;
    let mut session = probe.start_and_init(&state_dir).await?;
    let checked = unknown_action_session(&mut session, init).await;
    session.kill().await;
    checked
}

pub(super) async fn unknown_action_session(session: &mut Session, init: &Init) -> Checked {
    const ID: &str = "unknown-action-1";
    let action =
        ["mail.send", "twice.unannounced"].into_iter().find(|a| !init.supports(a)).unwrap_or("mail.send");
    let intent = json!({"id": ID, "action": action, "params": {"to": "ops@example.com", "text": "x"}});
    match session.request("propose", json!({"intent": intent}), REPLY_MS_MAX).await? {
        Reply::Error { code: 10, .. } => {}
        reply => return Err(format!("a propose of {action} was answered with {}", excerpt(reply.line()))),
    }
    let reply = session.request("status", json!({"ids": [ID]}), REPLY_MS_MAX).await?;
    if let Reply::Error { line, .. } = &reply {
        return Err(format!("status after the refusal got {}", excerpt(line)));
    }
    if status_views(&reply)?.iter().any(|(id, _)| id == ID) {
        return Err(format!("the refused intent is listed by status: {}", excerpt(reply.line())));
    }
    Ok(format!("code 10 to a propose of {action}, and status does not list it"))
}

pub(super) async fn propose_survives_sigkill(probe: &Probe<'_>, init: &Init) -> Option<Checked> {
    const ID: &str = "propose-survives-sigkill-1";
    let intent = probe.sample(init, ID)?;
    Some(survives(probe, intent, ID).await)
}

pub(super) async fn survives(probe: &Probe<'_>, intent: Value, id: &str) -> Checked {
    let state_dir = probe.state_dir(&PROPOSE_SURVIVES_SIGKILL)?;
    let mut first = probe.start_and_init(&state_dir).await?;
    let proposed = first.request("propose", json!({"intent": intent}), REPLY_MS_MAX).await;
    // The crash: SIGKILL to the group right after propose_ok, no shutdown.
    first.kill().await;
    match proposed? {
        Reply::Ok { .. } => {}
        Reply::Error { line, .. } => {
            return Err(format!(
                "propose got an error, not the propose_ok this rule needs: {}",
                excerpt(&line)
            ));
        }
    }
    let mut second = probe
        .start_and_init(&state_dir)
        .await
        .map_err(|e| format!("after the SIGKILL, a new process: {e}"))?;
    let reply = second.request("status", json!({}), REPLY_MS_MAX).await;
    second.kill().await;
    let reply = reply.map_err(|e| format!("after the SIGKILL and a restart: {e}"))?;
    if let Reply::Error { line, .. } = &reply {
        return Err(format!("status after the restart got {}", excerpt(line)));
    }
    match status_views(&reply)?.into_iter().find(|(got, _)| got == id) {
        Some((_, state)) => {
            Ok(format!("{id} listed as {state} after SIGKILL and a restart on the same state_dir"))
        }
        None => Err(format!(
            "intent {id} got propose_ok, but after SIGKILL and a restart on the same state_dir status does not list it: {}",
            excerpt(reply.line())
        )),
    }
}

pub(super) async fn shutdown_clean(probe: &Probe<'_>) -> Checked {
    let state_dir = probe.state_dir(&SHUTDOWN_CLEAN)?;
    let mut session = probe.start_and_init(&state_dir).await?;
    let checked = shutdown_session(&mut session).await;
    session.kill().await;
    checked
}

pub(super) async fn shutdown_session(session: &mut Session) -> Checked {
    match session.request("shutdown", json!({}), REPLY_MS_MAX).await? {
        Reply::Ok { .. } => {}
        Reply::Error { line, .. } => return Err(format!("shutdown got {}", excerpt(&line))),
    }
    match session.exit_within(EXIT_AFTER_SHUTDOWN_MS_MAX).await {
        Some(status) if status.success() => Ok("shutdown_ok, then exit status 0".into()),
        Some(status) => Err(format!(
            "shutdown_ok, then the process exited with {}; {}",
            describe(status),
            session.stderr_note().await
        )),
        None => Err(format!(
            "shutdown_ok, but the process was still running {EXIT_AFTER_SHUTDOWN_MS_MAX} ms later"
        )),
    }
}

/// The protocol rules' verdicts, and what `init_ok` said.
#[derive(Debug, Clone)]
pub struct Protocol {
    pub init: Init,
    pub verdicts: Vec<RuleVerdict>,
}

/// Runs every protocol rule against `command`, with the fakes on loopback; `dir` holds the
/// checks' state directories. An `Err` is a harness problem (the fakes could not start).
pub async fn check_protocol(command: &ExecutorCommand, dir: &Path, seed: u64) -> anyhow::Result<Protocol> {
    let fixture = fixture().context("the conformance fixture")?;
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::from_wall_clock());
    let fakes = Fakes::new(Arc::clone(&clock), seed);
    let world = World::prepare(&fixture, fakes, clock)?;
    let mut servers = Vec::new();
    for fake in world.fakes.all().into_iter().filter(|f| world.contracts.contains_key(f.name())) {
        let server = Server::start(fake, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .context("cannot listen on 127.0.0.1")?;
        servers.push(server);
    }
    let services = world.services(|name| Some(servers.iter().find(|s| s.name() == name)?.url()));
    let probe = Probe { command, dir: dir.to_path_buf(), services, samples: fixture.intents.clone() };
    let (first, init) = init_answered(&probe).await;
    let mut verdicts = vec![verdict(&INIT_ANSWERED, first)];
    if init.works {
        // Independent processes on independent state directories: side by side, so that an
        // executor that hangs costs one bound, not one per rule.
        let (replies, bad_line, unknown_type, unknown_action, survives, shutdown) = tokio::join!(
            replies_well_formed(&probe, &init),
            bad_line_code_12(&probe),
            unknown_type_code_10(&probe),
            unknown_action_refused(&probe, &init),
            propose_survives_sigkill(&probe, &init),
            shutdown_clean(&probe),
        );
        verdicts.push(verdict(&REPLIES_WELL_FORMED, replies));
        verdicts.push(verdict(&BAD_LINE_CODE_12, bad_line));
        verdicts.push(verdict(&UNKNOWN_TYPE_CODE_10, unknown_type));
        verdicts.push(verdict(&UNKNOWN_ACTION_REFUSED, unknown_action));
        verdicts.push(match survives {
            Some(checked) => verdict(&PROPOSE_SURVIVES_SIGKILL, checked),
            None => skipped(&PROPOSE_SURVIVES_SIGKILL, &unsupported_note()),
        });
        verdicts.push(verdict(&SHUTDOWN_CLEAN, shutdown));
    } else {
        for rule in &RULES[1..] {
            verdicts.push(skipped(rule, "needs a working init (see init-answered)"));
        }
    }
    for server in servers {
        let _ = tokio::time::timeout(Duration::from_millis(SERVER_STOP_MS_MAX), server.stop()).await;
    }
    Ok(Protocol { init, verdicts })
}
