//! The no-storage ceiling of the HTTP harness (scale.md §4, issue 31): a server that
//! takes `POST /api/v1/telemetry` like streamwatch does at the wire (HTTP/1.1 keep-alive,
//! a bearer, a JSON body read whole and parsed) and answers 204 without storing anything.
//! `loadgen http` and `qoe http` pointed at it show what the same harness reaches on the
//! same cores when the server's own work is nothing but HTTP and JSON.
//!
//! Usage: `null_server [--listen 127.0.0.1:18099]`; prints `listening on <addr>`.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:18099")]
    listen: String,
}

/// 204 for a bearer and a JSON body, 400 or 401 otherwise (as the real route would).
async fn telemetry(headers: HeaderMap, body: Bytes) -> StatusCode {
    if !headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer "))
    {
        return StatusCode::UNAUTHORIZED;
    }
    match serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
        Ok(_) => StatusCode::NO_CONTENT,
        Err(_) => StatusCode::BAD_REQUEST,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let app = Router::new().route("/api/v1/telemetry", post(telemetry));
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}
