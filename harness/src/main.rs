//! `twice`: the command line.

mod exit;
mod serve;

use clap::{Parser, Subcommand};

/// A fault-injection test harness for executors that must never do anything twice.
#[derive(Debug, Parser)]
#[command(name = "twice", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start the fake services on loopback with their control API (see docs/faults.md).
    Serve(serve::ServeArgs),
}

fn main() {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("twice: cannot start the async runtime: {e}");
            std::process::exit(exit::HARNESS_ERROR);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::serve(args).await,
        }
    });
    match result {
        Ok(()) => std::process::exit(exit::OK),
        Err(e) => {
            eprintln!("twice: {e:#}");
            std::process::exit(exit::HARNESS_ERROR);
        }
    }
}
