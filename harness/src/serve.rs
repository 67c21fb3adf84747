//! `twice serve`: the fakes on loopback with their control API, until Ctrl-C or SIGTERM.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use fake_services::{Fakes, Server, TokioClock};

/// Options of `twice serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on. Loopback unless given: the fakes have no authentication.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub bind: IpAddr,
    /// Port for the payments fake (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub payments_port: u16,
    /// Port for the workspaces fake (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub workspaces_port: u16,
    /// Also write the base URLs as JSON to this file ({"payments": "http://...", ...}).
    #[arg(long, value_name = "PATH")]
    pub urls_file: Option<PathBuf>,
    /// Seed for every random choice the fakes make (ids, fault probabilities).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), args.seed);
    let mut servers = Vec::new();
    for fake in fakes.all() {
        let port = match fake.name() {
            "payments" => args.payments_port,
            _ => args.workspaces_port,
        };
        let addr = SocketAddr::new(args.bind, port);
        let server = Server::start(fake, addr)
            .await
            .with_context(|| format!("cannot listen on {addr}; pick another port or --bind address"))?;
        servers.push(server);
    }
    let urls: BTreeMap<&str, String> = servers.iter().map(|s| (s.name(), s.url())).collect();
    if let Some(path) = &args.urls_file {
        let json = serde_json::to_string_pretty(&urls)?;
        std::fs::write(path, json + "\n").with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("twice serve: fakes listening (seed {}); Ctrl-C to stop", args.seed);
    for server in &servers {
        println!("  {:<11} {}   control: {}/__twice/", server.name(), server.url(), server.url());
    }
    if !args.bind.is_loopback() {
        eprintln!(
            "warning: listening on {} — anyone who can reach it can add faults and read ledgers",
            args.bind
        );
    }
    wait_for_stop().await?;
    for server in servers {
        server.stop().await;
    }
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
