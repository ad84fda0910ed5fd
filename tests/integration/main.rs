//! Rust integration tests: the real `engine` binary, started on port 0 with a temporary data
//! directory. One test binary (modules below) so the engine links once.

/// `engine serve` on port 0 (HTTP and gRPC) with `dir` as its data directory, stdin closed.
pub fn serve_command(dir: &std::path::Path) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_engine"));
    c.args([
        "serve",
        "--http-addr",
        "127.0.0.1:0",
        "--grpc-addr",
        "127.0.0.1:0",
        "--data-dir",
    ])
    .arg(dir)
    .stdin(std::process::Stdio::null());
    c
}

/// An engine in this process on a store in `dir` (single tenant, bootstrap token `t`).
pub fn in_process_engine(dir: &std::path::Path) -> engine::engine::Engine {
    let store = engine::store::Store::open(dir, engine::store::TenancyMode::Single).unwrap();
    engine::engine::Engine::new(
        store,
        engine::engine::EngineConfig {
            bootstrap_token: "t".into(),
            capability_secret: None,
        },
    )
}

/// Runs one Protocol v1 operation (JSON) with the bootstrap token of [`in_process_engine`].
pub async fn run_protocol(
    e: &engine::engine::Engine,
    op: serde_json::Value,
) -> engine::error::Result<engine::engine::Outcome> {
    let operation: engine::protocol::Operation = engine::protocol::decode(op, "operation").unwrap();
    e.execute(engine::engine::Envelope {
        credential: Some("t".into()),
        verified: None,
        tenant_header: None,
        scope: None,
        transport: engine::engine::Transport::Protocol,
        transaction: None,
        operation,
    })
    .await
}

mod grpc;
mod ingest;
mod search;
mod startup;
mod store;
mod transactions;
