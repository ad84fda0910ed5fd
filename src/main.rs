use clap::Parser;
use engine::cli::{Cli, Command};

/// The engine's allocator: request tasks allocate what the writer thread frees, a pattern
/// glibc malloc serves with arena locks and consolidation (docs/design.md, "Allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

extern "C" {
    /// mimalloc's option setter (mimalloc.h); the `mimalloc` crate builds and links it.
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc.h's `mi_option_t`, in v2 and v3 alike (retired options
/// stay in the enumeration as placeholders, so the numbers do not move); the crates export no
/// constant for it. Milliseconds before freed memory is purged (given back to the OS).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// Lets mimalloc keep memory the engine frees for up to `seconds` before it gives it back to
/// the operating system (`runtime.keep_freed_memory_s`; it purges in sweeps, the first free
/// after a sweep starting the clock). With mimalloc's own default, one second, a bulk request
/// that recurs every few minutes zero-filled its ~150 MB again, in page faults, each time
/// (docs/design.md, "Allocator").
fn keep_freed_memory(seconds: u64) {
    let ms =
        std::ffi::c_long::try_from(seconds.saturating_mul(1000)).unwrap_or(std::ffi::c_long::MAX);
    // SAFETY: sets one option's value, which mimalloc reads whenever it schedules a purge;
    // every value is valid (0: at once).
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, ms) }
}

fn mint(m: &engine::cli::MintArgs) -> Result<String, String> {
    let hex = std::env::var(&m.secret_env)
        .map_err(|_| format!("environment variable {} is not set", m.secret_env))?;
    let secret =
        engine::auth::capability_secret(&hex).map_err(|e| format!("{}: {e}", m.secret_env))?;
    engine::auth::parse_scopes(&m.scope).map_err(|e| format!("--scope: {e}"))?;
    if m.ttl == 0 {
        return Err("--ttl must be at least 1 second".into());
    }
    let now = engine::auth::now();
    let exp = i64::try_from(m.ttl)
        .ok()
        .and_then(|ttl| now.checked_add(ttl))
        .ok_or("--ttl is too large")?;
    let mut claims = serde_json::json!({"scope": m.scope, "iat": now, "exp": exp});
    if let Some(s) = &m.sub {
        claims["sub"] = serde_json::json!(s);
    }
    if let Some(t) = &m.tenant {
        if t.is_empty() {
            return Err("--tenant must not be empty".into());
        }
        engine::engine::check_tenant_name(t).map_err(|e| format!("--tenant: {}", e.message))?;
        claims["tenant"] = serde_json::json!(t);
    }
    Ok(engine::auth::mint(&secret, &claims))
}

/// `engine export` / `engine restore`: 0 done, 1 failed, 2 a bad flag or config file.
fn snapshot_command(
    export: bool,
    file: &std::path::Path,
    data_dir: Option<std::path::PathBuf>,
    config: Option<&std::path::Path>,
) -> i32 {
    let (dir, opts) = match engine::backup::resolve(data_dir, config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let done = if export {
        engine::backup::export(&dir, opts, file)
    } else {
        engine::backup::restore(&dir, opts, file)
    };
    match done {
        Ok(summary) => {
            eprintln!("{summary}");
            0
        }
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

/// `engine serve` on a resolved configuration: 0 stopped, 1 failed.
fn serve(cfg: engine::server::ServerConfig) -> i32 {
    keep_freed_memory(cfg.file.runtime.keep_freed_memory_s);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cfg.file.runtime.worker_threads())
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            engine::log::error(&format!("cannot start the runtime: {e}"));
            return 1;
        }
    };
    match rt.block_on(engine::server::run(cfg)) {
        Ok(()) => 0,
        Err(e) => {
            engine::log::error(&e);
            1
        }
    }
}

fn main() {
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        let code = match (&cli.export, &cli.restore) {
            (Some(f), None) => snapshot_command(true, f, cli.data_dir, cli.config.as_deref()),
            (None, Some(f)) => snapshot_command(false, f, cli.data_dir, cli.config.as_deref()),
            _ => {
                eprintln!("error: a command is required (engine --help lists them)");
                2
            }
        };
        std::process::exit(code);
    };
    if cli.export.is_some()
        || cli.restore.is_some()
        || cli.data_dir.is_some()
        || cli.config.is_some()
    {
        eprintln!("error: --export, --restore and their --data-dir / --config go without a command (or use `engine export` / `engine restore`)");
        std::process::exit(2);
    }
    match command {
        Command::Export(a) => std::process::exit(snapshot_command(
            true,
            &a.file,
            a.data_dir,
            a.config.as_deref(),
        )),
        Command::Restore(a) => std::process::exit(snapshot_command(
            false,
            &a.file,
            a.data_dir,
            a.config.as_deref(),
        )),
        Command::Version => {
            println!(
                "engine {} (protocol version {}, storage format version {})",
                env!("CARGO_PKG_VERSION"),
                engine::protocol::PROTOCOL_VERSION,
                engine::store::STORAGE_FORMAT_VERSION
            );
        }
        Command::Token(engine::cli::TokenCommand::Mint(m)) => {
            let code = match mint(&m) {
                Ok(token) => {
                    println!("{token}");
                    0
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    2
                }
            };
            std::process::exit(code);
        }
        Command::Import(args) => {
            let code = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(engine::loader::run(*args)),
                Err(e) => {
                    eprintln!("error: cannot start the runtime: {e}");
                    1
                }
            };
            std::process::exit(code);
        }
        Command::Serve(args) => {
            let code = match engine::server::resolve(*args) {
                Err(e) => {
                    engine::log::error(&e);
                    2
                }
                Ok(cfg) => serve(cfg),
            };
            std::process::exit(code);
        }
    }
}

#[cfg(test)]
mod tests {
    extern "C" {
        fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    }

    /// Option 15 is the purge delay: it holds mimalloc v3's default for it (1,000 ms, no
    /// other option's), and `keep_freed_memory` sets it in milliseconds.
    #[test]
    fn keep_freed_memory_sets_mimallocs_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(unsafe { mi_option_get(super::MI_OPTION_PURGE_DELAY) }, 1000);
        }
        super::keep_freed_memory(3600);
        assert_eq!(
            unsafe { mi_option_get(super::MI_OPTION_PURGE_DELAY) },
            3_600_000
        );
    }
}
