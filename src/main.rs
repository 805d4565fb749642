//! `streamwatch serve`: parse the configuration, build the service, run until SIGTERM/SIGINT.

use clap::Parser;
use streamwatch::config::{Cli, Command};
use streamwatch::startup::Server;
use tracing_subscriber::EnvFilter;

// mimalloc: the ingest path allocates per event (payload strings, rows) from many
// threads at once; it is measurably cheaper there than glibc malloc
// (docs/benchmarks.md, "Telemetry ingest").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("RUST_LOG").unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let Command::Serve(config) = cli.command;
    if let Err(e) = serve(*config).await {
        // One line naming what failed; the chain holds the setting and the cause.
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
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
