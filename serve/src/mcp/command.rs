//! `twice mcp`, the command: serve's world started as `twice serve` starts it, and one MCP
//! session over stdin and stdout on it, until the client closes stdin or a signal comes.

use std::sync::Arc;

/// `twice mcp`: serve's world (its fakes, control endpoint and `--scenario`, as `twice serve`
/// starts them) with MCP over stdin and stdout, until the client closes stdin or SIGTERM; with
/// `--mcp-port`, over streamable HTTP as well. Nothing but MCP goes to stdout.
pub async fn run(args: crate::ServeArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    let served = crate::start(&args).await?;
    let urls: Vec<String> = served.urls().iter().map(|(name, url)| format!("{name} {url}")).collect();
    tracing::info!(target: "twice::mcp", seed = args.seed, "twice mcp: MCP over stdio; {}", urls.join(", "));
    let (transport, writer) =
        super::stdio::spawn(tokio::io::BufReader::new(tokio::io::stdin()), tokio::io::stdout());
    let server = super::Server::new(Arc::clone(&served.world), args.tool_timeout_ms, super::Transport::Stdio);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot watch SIGTERM")?;
    let session = async {
        match rmcp::serve_server(server, transport).await {
            // Ends when the client closes stdin.
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(e) => tracing::warn!(target: "twice::mcp", "the MCP session did not start: {e}"),
        }
    };
    tokio::select! {
        _ = session => {}
        _ = terminate.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    // Every reply given to the writer is written before the fakes stop.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    served.stop().await;
    Ok(())
}
