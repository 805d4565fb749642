//! `streamwatch serve`: parse the configuration, build the service, run until SIGTERM/SIGINT.

use clap::Parser;
use streamwatch::config::{Cli, Command, LogFormat, UsersCommand};
use streamwatch::startup::Server;
use tracing_subscriber::EnvFilter;

// mimalloc: the ingest path allocates per event (payload strings, rows) from many
// threads at once; it is measurably cheaper there than glibc malloc
// (docs/benchmarks.md, "Telemetry ingest").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => match streamwatch::config::explain(&e, &argv) {
            // One line naming the setting as the operator gave it, never its value.
            Some(line) => {
                eprintln!("error: {line}");
                std::process::exit(2);
            }
            // --help, --version, and usage errors clap explains best itself.
            None => e.exit(),
        },
    };
    let format = match &cli.command {
        Command::Serve(c) => c.log_format,
        Command::Users(UsersCommand::Add(a)) => a.log_format,
    };
    init_logs(format);
    let result = match cli.command {
        Command::Serve(config) => serve(*config).await,
        Command::Users(UsersCommand::Add(add)) => add_user(*add).await,
    };
    if let Err(e) = result {
        // One line naming what failed; the chain holds the setting and the cause.
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// Logs go to stderr (stdout is for command output, e.g. `users add`): human lines, with
/// colours only on a terminal, or one JSON object per line (`STREAMWATCH_LOG_FORMAT=json`).
fn init_logs(format: LogFormat) {
    let filter = EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().with_current_span(true).init(),
    }
}

async fn add_user(add: streamwatch::config::AddUser) -> anyhow::Result<()> {
    let (user, password) = streamwatch::startup::add_user(add).await?;
    println!("created user {} ({})", user.email, user.id);
    println!("one-time password (shown once, not stored): {password}");
    println!("it works for the first sign-in only: the dashboard then asks for a new password");
    Ok(())
}

async fn serve(config: streamwatch::config::Config) -> anyhow::Result<()> {
    let server = Server::build(config).await?;
    server.run(shutdown_signal()).await
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    tracing::info!("shutting down");
}
