//! Command line: `engine serve`, `engine import`, `engine export`, `engine restore`,
//! `engine token mint`, `engine version` (and `engine --export FILE` / `--restore FILE`).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "engine", version, about = "Graph record database engine")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Same as `engine export FILE`: write the store to a graph snapshot (server stopped).
    #[arg(long, value_name = "FILE", conflicts_with = "restore")]
    pub export: Option<PathBuf>,
    /// Same as `engine restore FILE`: restore a graph snapshot into a new data directory.
    #[arg(long, value_name = "FILE")]
    pub restore: Option<PathBuf>,
    /// Data directory of --export / --restore (default: ENGINE_DATA_DIR, the config file's, ./data).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// TOML configuration file of --export / --restore (data_dir and [storage]).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    Serve(Box<ServeArgs>),
    /// Load a JSON, JSON Lines or CSV file into a running server, in batches.
    Import(Box<ImportArgs>),
    /// Capability tokens (the operator's control-plane helper).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Write the whole store (every tenant) to a graph snapshot; the server must be stopped.
    Export(SnapshotArgs),
    /// Restore a graph snapshot into a new (absent or empty) data directory.
    Restore(SnapshotArgs),
    /// Print the engine, protocol and storage format versions.
    Version,
}

/// `engine export FILE` / `engine restore FILE`: see docs/operations.md ("Export and restore").
#[derive(Debug, Args, Clone)]
pub struct SnapshotArgs {
    /// The snapshot file (`-`: standard output for export, standard input for restore).
    pub file: PathBuf,
    /// Data directory (default: the config file's data_dir, then ./data).
    #[arg(long, env = "ENGINE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// TOML configuration file (data_dir and the [storage] settings are used).
    #[arg(long, env = "ENGINE_CONFIG")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a capability token signed with the secret (hex) found in an environment variable.
    Mint(MintArgs),
}

#[derive(Debug, Args)]
pub struct MintArgs {
    /// Environment variable holding the hex secret (never a flag, so it stays out of shell history).
    #[arg(long, default_value = "SERVICE_CAPABILITY_SECRET")]
    pub secret_env: String,
    /// The one tenant the token may use (required for a multitenant engine, absent otherwise).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Space-separated permissions: read, write, *.
    #[arg(long)]
    pub scope: String,
    /// Lifetime in seconds.
    #[arg(long, default_value_t = 3600)]
    pub ttl: u64,
    /// Subject (informational).
    #[arg(long)]
    pub sub: Option<String>,
}

/// `engine import --label L FILE`: see docs/operations.md ("Bulk loading").
#[derive(Debug, Args, Clone)]
pub struct ImportArgs {
    /// The file: .json (an array of documents or one object), .jsonl / .ndjson (one
    /// document per line) or .csv (a header row, then one record per row).
    pub file: PathBuf,
    /// Label of the imported records (nested objects take their key as label).
    #[arg(long)]
    pub label: String,
    /// Server URL.
    #[arg(long, env = "ENGINE_URL", default_value = "http://127.0.0.1:3000")]
    pub url: String,
    /// Credential (the bootstrap token or a capability token).
    #[arg(
        long,
        env = "SERVICE_TOKEN",
        hide_env_values = true,
        default_value = "dev-token"
    )]
    pub token: String,
    /// Tenant, on a multitenant server.
    #[arg(long, env = "SERVICE_TENANT")]
    pub tenant: Option<String>,
    /// Documents (or CSV rows) per request; each batch is one atomic, durable write.
    #[arg(long, default_value_t = 500)]
    pub batch_size: usize,
    /// Batches in flight at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Format when the extension does not tell: json, jsonl, ndjson or csv.
    #[arg(long)]
    pub format: Option<String>,
    /// CSV column separator (default `,`).
    #[arg(long)]
    pub delimiter: Option<char>,
    /// Upsert: comma-separated properties to match on (empty string: all incoming ones).
    #[arg(long)]
    pub merge_by: Option<String>,
    /// Upsert strategy: append (default) or rewrite.
    #[arg(long)]
    pub merge_strategy: Option<String>,
    /// Relationship type of nested documents' links.
    #[arg(long)]
    pub relationship_type: Option<String>,
    /// No progress bar (the summary is still printed).
    #[arg(long)]
    pub quiet: bool,
    /// Seconds to wait for one batch's answer; a batch still unanswered then fails the load
    /// (it may or may not have been written).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
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
    /// Threads that serve connections; 0 (default) = one fewer than the CPUs, at least 1.
    #[arg(long, env = "ENGINE_WORKERS")]
    pub workers: Option<usize>,
    /// Seconds freed memory may be kept for reuse before it goes back to the operating
    /// system (default 3600; 0 = at once).
    #[arg(long, env = "ENGINE_KEEP_FREED_MEMORY_S")]
    pub keep_freed_memory_s: Option<u64>,
}
