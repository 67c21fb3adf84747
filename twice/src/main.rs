//! `twice`: the command line.

mod cli;

use runner::exit;

use clap::{Parser, Subcommand};

/// The version and the commit it was built from (`unknown` outside a git checkout).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("TWICE_COMMIT"), ")");

/// A fault-injection test harness for executors that must never do anything twice.
#[derive(Debug, Parser)]
#[command(name = "twice", version = VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    logs: cli::logs::LogArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the scenario catalog and a generated search against an executor, check every
    /// invariant, and write results (exit 0: all held, 1: a violation, 2: could not run).
    Run(cli::RunArgs),
    /// Check an executor against the protocol's rules, then run the catalog against it and
    /// print a conformance table: action x failure mode (exit 0: all passed, 1: a rule or a
    /// scenario failed, 2: could not run).
    CheckExecutor(cli::CheckArgs),
    /// Run one scenario file (e.g. a shrunk failure) and print its timeline.
    Replay(cli::ReplayArgs),
    /// The scenario catalog.
    Scenarios {
        #[command(subcommand)]
        command: ScenariosCommand,
    },
    /// Work with report directories.
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
    /// Start the fake services on loopback with their control API, and serve's own endpoint
    /// for a scenario's world, its steps and the verdict on an application's claims (see
    /// docs/byo.md).
    #[command(after_help = serve::clients::help())]
    Serve(serve::ServeArgs),
    /// Send an application's claims to a running `twice serve` and write the report of its
    /// verdict (exit 0: all held, 1: a violation, 2: could not check).
    Check(serve::CheckArgs),
    /// Serve a scenario's world as MCP tools over stdio (and, with --mcp-port, streamable
    /// HTTP): an agent's tool calls meet the scenario's faults, and `twice check` judges what
    /// it claims (see docs/agents.md). Takes every option of `twice serve`.
    Mcp(serve::ServeArgs),
    /// Print a completion script for a shell (e.g. `twice completions bash >
    /// ~/.local/share/bash-completion/completions/twice`).
    Completions {
        /// bash, elvish, fish, powershell or zsh.
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Subcommand)]
enum ReportCommand {
    /// Join the results of sharded runs (`twice run --shard K/N`) into one report, the same
    /// as the unsharded run's.
    Merge(cli::MergeArgs),
}

#[derive(Debug, Subcommand)]
enum ScenariosCommand {
    /// List the catalog: name, failure mode, description (or, with `--format json`, every
    /// scenario whole).
    List(cli::ListArgs),
}

fn main() {
    let cli = Cli::parse();
    // Runs log warnings and errors unless asked for more, so that a plain run reads as before;
    // serve's log is its faults and steps, so it starts at info.
    let level = match cli.command {
        Command::Serve(_) | Command::Mcp(_) => serve::LOG_DEFAULT,
        _ => tracing::level_filters::LevelFilter::WARN,
    };
    cli::logs::init(&cli.logs, level);
    if matches!(cli.command, Command::Run(_) | Command::Replay(_) | Command::CheckExecutor(_)) {
        if let Err(e) = runner::workdir::on_interrupt() {
            // The run still runs; only an interrupt would leave executors and directories behind.
            tracing::warn!(target: "twice", "{e:#}");
        }
        // Orphans of the executors (daemons that left their process group) are adopted by
        // twice and killed when it exits (`workdir::exit`), not left to init.
        if !runner::process::become_subreaper() {
            tracing::debug!(target: "twice", "not a child subreaper: an executor's orphans go to init");
        }
    }
    // Runs drive their own runtimes (one per scenario in sim); only `serve` and `mcp` need one
    // here.
    let (serve_args, mcp) = match cli.command {
        Command::Run(args) => finish(cli::run(args)),
        Command::Replay(args) => finish(cli::replay(args)),
        Command::CheckExecutor(args) => finish(cli::check_executor(args)),
        Command::Scenarios { command: ScenariosCommand::List(args) } => finish(cli::list(args)),
        Command::Report { command: ReportCommand::Merge(args) } => finish(cli::merge(args)),
        Command::Check(args) => finish(serve::check(args)),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "twice", &mut std::io::stdout());
            std::process::exit(exit::OK);
        }
        Command::Serve(args) => (args, false),
        Command::Mcp(args) => (args, true),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            cli::logs::say_error(&format!("cannot start the async runtime: {e}"));
            std::process::exit(exit::HARNESS_ERROR);
        }
    };
    let result = runtime.block_on(async {
        if mcp { serve::mcp::command::run(serve_args).await } else { serve::serve(serve_args).await }
    });
    match result {
        Ok(()) => std::process::exit(exit::OK),
        Err(e) => {
            cli::logs::say_error(&format!("{e:#}"));
            std::process::exit(exit::HARNESS_ERROR);
        }
    }
}

/// Exits with a command's code, or reports its error as a harness error.
fn finish(ran: anyhow::Result<i32>) -> ! {
    match ran {
        Ok(code) => runner::workdir::exit(code),
        Err(e) => {
            runner::interrupt::hold_if_interrupted();
            cli::logs::say_error(&format!("{e:#}"));
            runner::workdir::exit(exit::HARNESS_ERROR);
        }
    }
}
