//! `twice serve`: the fakes on loopback with their control API, and serve's own control
//! endpoint (a scenario's world on demand, its steps, the verdict on an application's
//! claims, a reset of every fake), until Ctrl-C or SIGTERM. `docs/byo.md` is the user's view.

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

pub mod accounts;
pub mod check;
mod claims;
pub mod client;
pub mod clients;
pub mod control;
mod kept;
pub mod mcp;
mod settle;
pub mod world;

pub use check::{CheckArgs, check};

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use fake_services::{Fakes, Listener, Server};
use vocabulary::TokioClock;

use control::ControlServer;
use world::{StepTap, World};

/// Options of `twice serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. Loopback unless given: the control API (`/__twice/*`) has no
    /// authentication, so an address beyond loopback also needs `--allow-remote`.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub bind: IpAddr,
    /// Allow a `--bind` address beyond loopback: anyone who can reach it can then arm
    /// faults, reset the fakes and read every ledger.
    #[arg(long)]
    pub allow_remote: bool,
    /// Port for the payments fake (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub payments_port: u16,
    /// Port for the workspaces fake (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub workspaces_port: u16,
    /// Port for the files fake (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub files_port: u16,
    /// Port for the chain fake (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub chain_port: u16,
    /// Port for the messages fake, its API and its test mailbox (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub messages_port: u16,
    /// Port for serve's own control endpoint: scenario, steps, check, reset (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub control_port: u16,
    /// Also write the base URLs as JSON to this file ({"payments": "http://...", ...,
    /// "control": "http://..."}), once every listener is up: a test can wait for the file.
    #[arg(long, value_name = "PATH")]
    pub urls_file: Option<PathBuf>,
    /// Seed for every random choice the fakes make (ids, fault probabilities).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Set up this scenario's world at start (a catalog name or a scenario file), as
    /// `POST /__twice/scenario` does.
    #[arg(long, value_name = "NAME|FILE")]
    pub scenario: Option<String>,
    /// Also serve the fakes as MCP tools over streamable HTTP on this port (0: any free
    /// port), at `/mcp` (docs/agents.md); its URL is `mcp` in the URLs file.
    #[arg(long, value_name = "PORT")]
    pub mcp_port: Option<u16>,
    /// The longest each request an MCP tool makes may take (default: the scenario's request
    /// timeout, 1000 ms unless it says otherwise).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub tool_timeout_ms: Option<u64>,
    /// The payments fake accepts only its seeded keys (sk_test_twice and any restricted key
    /// seeded), and answers any other with Stripe's 401 "Invalid API Key provided", as a
    /// scenario's `strict_keys = true` does. Without it, any non-empty key is accepted.
    #[arg(long)]
    pub strict_keys: bool,
}

/// What serve says on stderr when it listens beyond loopback.
pub const REMOTE_WARNING: &str = "the control API (/__twice/*) has no authentication: anyone who can reach";

impl ServeArgs {
    /// Refuses a `--bind` address beyond loopback without `--allow-remote`.
    pub fn check_bind(&self) -> anyhow::Result<()> {
        if !self.bind.is_loopback() && !self.allow_remote {
            anyhow::bail!(
                "--bind {} is beyond loopback and the control API (/__twice/*) has no authentication; \
                 add --allow-remote to listen there anyway, or bind 127.0.0.1",
                self.bind
            );
        }
        Ok(())
    }

    /// The port asked for `service`.
    pub fn port(&self, service: &str) -> u16 {
        match service {
            "payments" => self.payments_port,
            "workspaces" => self.workspaces_port,
            "files" => self.files_port,
            "chain" => self.chain_port,
            "messages" => self.messages_port,
            _ => 0,
        }
    }
}

/// Serve, listening.
pub struct Served {
    pub world: Arc<World>,
    servers: Vec<Server>,
    control: ControlServer,
    mcp: Option<mcp::http::McpHttp>,
}

impl Served {
    /// Base URL per service, and `control`.
    pub fn urls(&self) -> BTreeMap<String, String> {
        self.world.urls()
    }

    pub async fn stop(self) {
        if let Some(mcp) = self.mcp {
            mcp.stop().await;
        }
        for server in self.servers {
            server.stop().await;
        }
        self.control.stop().await;
    }
}

/// Starts every fake and the control endpoint as `args` say, sets up `--scenario` if given,
/// and writes `--urls-file`.
pub async fn start(args: &ServeArgs) -> anyhow::Result<Served> {
    args.check_bind()?;
    let scenario = match &args.scenario {
        Some(name) => Some(runner::pipeline::load(name)?),
        None => None,
    };
    let base: Arc<dyn vocabulary::Clock> = Arc::new(TokioClock::from_wall_clock());
    let fakes = Fakes::new(Arc::clone(&base), args.seed);
    let world = Arc::new(World::new(fakes.clone(), base, args.seed, args.strict_keys));
    let tap: Arc<dyn fake_services::Tap> = Arc::new(StepTap(Arc::clone(&world)));
    let mut servers = Vec::new();
    for fake in fakes.all() {
        let addr = SocketAddr::new(args.bind, args.port(fake.name()));
        let flag = format!("--{}-port", fake.name());
        let listener = Listener { origin: None, tap: Some(Arc::clone(&tap)) };
        let server = Server::start_with(fake, addr, listener)
            .await
            .with_context(|| format!("cannot listen on {addr}; pick another {flag} or --bind address"))?;
        servers.push(server);
    }
    let addr = SocketAddr::new(args.bind, args.control_port);
    let control = ControlServer::start(Arc::clone(&world), addr)
        .await
        .with_context(|| format!("cannot listen on {addr}; pick another --control-port or --bind address"))?;
    let mcp = match args.mcp_port {
        None => None,
        Some(port) => {
            let addr = SocketAddr::new(args.bind, port);
            let mcp = mcp::http::start(Arc::clone(&world), addr, args.tool_timeout_ms).await.with_context(
                || format!("cannot listen on {addr}; pick another --mcp-port or --bind address"),
            )?;
            Some(mcp)
        }
    };
    {
        let mut urls = world.urls.lock().unwrap_or_else(|p| p.into_inner());
        for server in &servers {
            urls.insert(server.name().to_string(), server.url());
        }
        urls.insert("control".into(), control.url());
        if let Some(mcp) = &mcp {
            urls.insert("mcp".into(), mcp.url().to_string());
        }
    }
    if let Some(case) = scenario {
        world.set(case)?;
    }
    if let Some(path) = &args.urls_file {
        // Written whole under another name, then renamed: a test polling for the file never
        // reads half of it.
        let partial = path.with_extension("partial");
        std::fs::write(&partial, control::urls_json(&world.urls()))
            .with_context(|| format!("cannot write {}", partial.display()))?;
        std::fs::rename(&partial, path).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(Served { world, servers, control, mcp })
}

/// Serve's log level when neither `-v`/`-q` nor `RUST_LOG` says one (`crate::cli::logs`):
/// info, every fault fired and every step, from serve and the fakes.
pub const LOG_DEFAULT: tracing::level_filters::LevelFilter = tracing::level_filters::LevelFilter::INFO;

/// Serves until Ctrl-C or SIGTERM; its log lines go where the command line set them up.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let served = start(&args).await?;
    println!("twice serve: fakes listening (seed {}); Ctrl-C to stop", args.seed);
    for (name, url) in served.urls() {
        let control = match name.as_str() {
            "control" => "scenario, steps, check, reset",
            "mcp" => "MCP tools over streamable HTTP",
            _ => "control: URL/__twice/",
        };
        println!("  {name:<11} {url}   {control}");
    }
    println!(
        "  accounts    funded on the chain with 10000 ether each; test keys, public: never use them on a real chain"
    );
    for account in accounts::DEV_ACCOUNTS {
        println!("    {}  private key {}", account.address, account.private_key);
    }
    if args.strict_keys {
        println!("  keys        payments accepts only sk_test_twice and seeded rk_ keys (--strict-keys)");
    }
    if let Some(current) = served.world.lock().as_ref() {
        let steps = current.steps.len();
        println!(
            "  scenario    {} ({} intents, {steps} steps)",
            current.case.scenario.name,
            current.case.scenario.intents.len()
        );
    }
    if !args.bind.is_loopback() {
        // On stderr whatever the log level: a log filter must not hide it.
        eprintln!(
            "twice serve: warning: listening on {}: {REMOTE_WARNING} it can arm faults, reset the fakes and read every ledger",
            args.bind
        );
    }
    wait_for_stop().await?;
    served.stop().await;
    println!("twice serve: stopped");
    Ok(())
}

async fn wait_for_stop() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot watch Ctrl-C")?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
