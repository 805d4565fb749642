//! Helpers shared by the benchmark binaries: a fresh PostgreSQL database per run, the
//! machine description printed with every figure, and the load generators' HTTP connection.

use anyhow::{Context, Result};
use sqlx::Connection;

/// Creates an empty database `<prefix>_<id>` on the server of `admin` and returns its URL.
/// Each bench uses its own prefix, so a reused database is never another bench's.
pub async fn fresh_pg(admin: &str, prefix: &str) -> Result<String> {
    let name = format!("{prefix}_{}", streamwatch::time::new_id());
    let mut conn = sqlx::PgConnection::connect(admin)
        .await
        .context("connect to PostgreSQL")?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await?;
    Ok(match admin.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => format!("{admin}/{name}"),
    })
}

/// Total memory, e.g. `23.5 GiB RAM`, from /proc/meminfo.
pub fn mem_total() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
        })
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| format!("{:.1} GiB RAM", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown RAM".into())
}

/// One keep-alive HTTP/1.1 connection to the service (plain hyper: the cheapest client,
/// so a load generator leaves the CPU to the server it measures).
pub struct HttpConn {
    /// The connection's request side.
    pub sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
}

impl HttpConn {
    /// Connects to `addr` (`host:port`) without Nagle's delay.
    pub async fn open(addr: &str) -> Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .context("connect")?;
        stream.set_nodelay(true).context("nodelay")?;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .context("handshake")?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self { sender })
    }
}
