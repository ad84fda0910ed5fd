//! Server lifecycle: resolve the configuration, open the store, bind the listeners, report
//! their bound addresses, and shut down gracefully (stop accepting, finish in-flight
//! requests, let the writer commit what is queued, exit 0).

use crate::cli::ServeArgs;
use crate::config::{FileConfig, DEV_TOKEN};
use crate::engine::{Engine, EngineConfig};
use crate::metrics::Metrics;
use crate::store::{Store, TenancyMode};
use crate::wire::http::{self, HttpState};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long in-flight requests get to finish at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The resolved configuration of a running server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub file: FileConfig,
    pub token: String,
    pub capability_secret: Option<Vec<u8>>,
}

/// Applies defaults < file < environment < flags (clap has already merged env under flags).
pub fn resolve(args: ServeArgs) -> Result<ServerConfig, String> {
    let mut file = match &args.config {
        Some(path) => FileConfig::load(path)?,
        None => FileConfig::default(),
    };
    if let Some(d) = args.data_dir {
        file.data_dir = d;
    }
    if args.multitenant {
        file.multitenant = true;
    }
    if let Some(a) = args.http_addr {
        file.listen.http = a;
    }
    if let Some(a) = args.grpc_addr {
        file.listen.grpc = a;
    }
    if let Some(a) = args.pg_addr {
        file.listen.pg = a;
    }
    if let Some(a) = args.bolt_addr {
        file.listen.bolt = a;
    }
    if let Some(b) = args.max_body_bytes {
        file.limits.max_body_bytes = b;
    }
    if let Some(e) = args.rest_envelope {
        file.rest.envelope = e;
    }
    if let Some(w) = args.workers {
        file.runtime.workers = w;
    }
    if let Some(s) = args.keep_freed_memory_s {
        file.runtime.keep_freed_memory_s = s;
    }
    file.validate()?;
    // Every listener address is checked here, with the other settings (a refused setting
    // exits 2). The SQL wire and Bolt listeners are not started yet; their addresses are
    // still checked, so a typo is found now rather than when they are.
    parse_addr("HTTP", &file.listen.http)?;
    parse_addr("gRPC", &file.listen.grpc)?;
    parse_addr("SQL wire", &file.listen.pg)?;
    parse_addr("Bolt", &file.listen.bolt)?;
    let capability_secret = match args.capability_secret {
        Some(hex) => Some(crate::auth::capability_secret(&hex)?),
        None => None,
    };
    // An empty token (an unset variable in a unit file) matches no credential: a server
    // nobody could use.
    if args.token.as_deref() == Some("") {
        return Err("the bootstrap token (--token or SERVICE_TOKEN) is empty".into());
    }
    Ok(ServerConfig {
        file,
        token: args.token.unwrap_or_else(|| DEV_TOKEN.to_string()),
        capability_secret,
    })
}

fn parse_addr(what: &str, a: &str) -> Result<SocketAddr, String> {
    a.parse().map_err(|_| {
        format!("{what} address {a:?} is not an ip:port (an IP address, not a host name)")
    })
}

fn announce(kind: &str, addr: SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening {kind} {addr}");
    let _ = out.flush();
}

/// Registers the SIGTERM/SIGINT handlers now (before any listener is announced, so a signal
/// sent right after the `listening` line is handled) and returns a future that resolves on
/// the first of them.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let mut int =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot handle SIGINT: {e}"))?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {},
            _ = int.recv() => {},
        }
    })
}

/// Runs the server until SIGTERM/SIGINT.
pub async fn run(cfg: ServerConfig) -> Result<(), String> {
    let http_addr = parse_addr("HTTP", &cfg.file.listen.http)?;
    let grpc_addr = parse_addr("gRPC", &cfg.file.listen.grpc)?;
    // SQL wire and Bolt are checked although their listeners are not started yet, so a
    // configuration that starts today keeps starting when they are.
    let pg_addr = parse_addr("SQL wire", &cfg.file.listen.pg)?;
    let bolt_addr = parse_addr("Bolt", &cfg.file.listen.bolt)?;
    let listeners = [
        ("HTTP", http_addr),
        ("gRPC", grpc_addr),
        ("SQL wire", pg_addr),
        ("Bolt", bolt_addr),
    ];
    let off_loopback = |of: &[(&'static str, SocketAddr)]| -> Option<(&'static str, SocketAddr)> {
        of.iter().copied().find(|(_, a)| !a.ip().is_loopback())
    };
    if cfg.token == DEV_TOKEN {
        // Every listener takes the token: none may be reachable from other machines.
        if let Some((kind, addr)) = off_loopback(&listeners) {
            return Err(format!(
                "refusing to listen on non-loopback address {addr} ({kind}) with the development token; set --token or SERVICE_TOKEN"
            ));
        }
        crate::log::warn("running with the development token `dev-token`: set --token or SERVICE_TOKEN outside local development");
    }
    // gRPC, SQL wire and Bolt: on a multitenant engine only loopback (SPEC.md "Tenant
    // selection").
    if cfg.file.multitenant {
        if let Some((kind, addr)) = off_loopback(&listeners[1..]) {
            return Err(format!(
                "refusing to bind {kind} to non-loopback address {addr} on a multitenant engine (it takes only the bootstrap token)"
            ));
        }
    }
    // Every refusal comes before the store opens: a refused start leaves no data directory
    // behind (nor fixes the tenancy mode of a new one). Connections that arrive while the
    // store opens wait in the listen backlog until the `listening` lines.
    let grpc_listener = tokio::net::TcpListener::bind(grpc_addr)
        .await
        .map_err(|e| format!("cannot listen on {grpc_addr} (gRPC): {e}"))?;
    let grpc_bound = grpc_listener.local_addr().map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind(http_addr)
        .await
        .map_err(|e| format!("cannot listen on {http_addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let signal = shutdown_signal()?;
    let mode = if cfg.file.multitenant {
        TenancyMode::Multi
    } else {
        TenancyMode::Single
    };
    let data_dir = cfg.file.data_dir.clone();
    let opts = crate::store::StoreOptions {
        cache_mb: cfg.file.storage.cache_mb,
        checkpoint_mb: cfg.file.storage.checkpoint_mb,
        key_memo_mb: cfg.file.storage.key_memo_mb,
    };
    let store = tokio::task::spawn_blocking(move || Store::open_with(&data_dir, mode, opts))
        .await
        .map_err(|e| format!("store open task failed: {e}"))?
        .map_err(|e| e.message)?;
    let engine = Arc::new(Engine::new(
        store,
        EngineConfig {
            bootstrap_token: cfg.token.clone(),
            capability_secret: cfg.capability_secret.clone(),
        },
    ));
    engine.resume_reclaims().map_err(|e| e.message)?;
    crate::query::filter::set_max_hops(cfg.file.limits.max_hops);
    let state = Arc::new(HttpState {
        engine: engine.clone(),
        metrics: Metrics::default(),
        limits: cfg.file.limits.clone(),
        flat_lists: cfg.file.rest.envelope == "flat",
    });
    crate::log::info(&format!(
        "engine {} serving data directory {} in {} with {} worker thread(s)",
        env!("CARGO_PKG_VERSION"),
        cfg.file.data_dir.display(),
        mode.describe(),
        tokio::runtime::Handle::current().metrics().num_workers()
    ));
    let (grpc_stop, grpc_stopped) = tokio::sync::oneshot::channel::<()>();
    let grpc = {
        let (engine, limits) = (engine.clone(), cfg.file.limits.clone());
        tokio::spawn(async move {
            let stop = async {
                let _ = grpc_stopped.await;
            };
            crate::wire::grpc::serve(engine, &limits, grpc_listener, stop).await
        })
    };
    // gRPC first: the `listening http` line is the last one, once everything serves.
    announce("grpc", grpc_bound);
    announce("http", bound);

    let send_stall = Duration::from_millis(cfg.file.limits.request_timeout_ms);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let builder = http::connection_builder();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            stream = crate::wire::accept(&listener, "HTTP") => {
                let state = state.clone();
                let conn = builder.serve_connection(
                    crate::wire::stall::SendTimeout::new(TokioIo::new(stream), send_stall),
                    service_fn(move |req| http::handle(state.clone(), req)),
                );
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            _ = &mut signal => break,
        }
    }
    drop(listener);
    crate::log::info("shutting down: finishing in-flight requests");
    let _ = grpc_stop.send(());
    // HTTP and gRPC drain at once, within one deadline.
    let drained_by = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    if tokio::time::timeout_at(drained_by, graceful.shutdown())
        .await
        .is_err()
    {
        crate::log::warn("some connections did not finish in time");
    }
    match tokio::time::timeout_at(drained_by, grpc).await {
        Ok(Ok(Err(e))) => crate::log::warn(&e),
        Err(_) => crate::log::warn("some gRPC calls did not finish in time"),
        _ => {}
    }
    tokio::task::spawn_blocking(move || engine.store.shutdown())
        .await
        .map_err(|e| format!("store shutdown failed: {e}"))?;
    crate::log::info("stopped");
    Ok(())
}
