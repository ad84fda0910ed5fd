//! Command line: `engine serve`, `engine version`.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "engine", version, about = "Graph record database engine")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    Serve(Box<ServeArgs>),
    /// Print the engine, protocol and storage format versions.
    Version,
}

/// Flags win over environment variables, which win over the config file, which wins over
/// the built-in defaults.
#[derive(Debug, Args, Default)]
pub struct ServeArgs {
    /// Data directory (default ./data).
    #[arg(long, env = "ENGINE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// TOML configuration file (see packaging/engine.toml).
    #[arg(long, env = "ENGINE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Bootstrap token (default: the development token `dev-token`, loopback only).
    #[arg(long, env = "SERVICE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// HMAC secret for capability tokens, hex. Never written to disk.
    #[arg(long, env = "SERVICE_CAPABILITY_SECRET", hide_env_values = true)]
    pub capability_secret: Option<String>,
    /// Create the data directory in multitenant mode (fixed at creation).
    #[arg(long)]
    pub multitenant: bool,
    /// HTTP listen address (default 127.0.0.1:3000; port 0 picks a free port).
    #[arg(long, env = "ENGINE_HTTP_ADDR")]
    pub http_addr: Option<String>,
    /// gRPC listen address (default 127.0.0.1:50051).
    #[arg(long, env = "ENGINE_GRPC_ADDR")]
    pub grpc_addr: Option<String>,
    /// PostgreSQL wire listen address (default 127.0.0.1:5433).
    #[arg(long, env = "ENGINE_PG_ADDR")]
    pub pg_addr: Option<String>,
    /// Bolt listen address (default 127.0.0.1:7687).
    #[arg(long, env = "ENGINE_BOLT_ADDR")]
    pub bolt_addr: Option<String>,
    /// Largest request body in bytes (default 32 MiB).
    #[arg(long, env = "ENGINE_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<u64>,
    /// REST list envelope: `spec` (default) or `flat`.
    #[arg(long, env = "ENGINE_REST_ENVELOPE")]
    pub rest_envelope: Option<String>,
}
