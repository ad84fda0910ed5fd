//! Server configuration: built-in defaults < config file < environment < flags.
//! The file carries a schema version; another version is refused at startup. Secrets (the
//! bootstrap token, the capability secret) never live in the file.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const CONFIG_SCHEMA_VERSION: i64 = 1;
pub const DEV_TOKEN: &str = "dev-token";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    pub schema_version: i64,
    pub data_dir: PathBuf,
    /// Tenancy mode of a new data directory; an existing one keeps the mode it was created with.
    pub multitenant: bool,
    pub listen: Listen,
    pub limits: Limits,
    pub rest: Rest,
    pub storage: Storage,
    pub runtime: Runtime,
}

/// The config file's `[runtime]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Runtime {
    /// Threads that serve connections (the tokio runtime's workers); 0 = automatic
    /// (`worker_threads`).
    pub workers: usize,
    /// Seconds the `engine` binary's allocator may keep memory the engine freed, for reuse,
    /// before it gives it back to the operating system; 0 gives it back at once. It gives
    /// memory back in sweeps: the first free after a sweep starts the clock, and when this
    /// time has run out everything free then goes back, so freed memory is kept for up to
    /// this long. Memory given back is zero-filled again, a page fault per 4 KiB, when next
    /// used (docs/design.md, "Allocator").
    pub keep_freed_memory_s: u64,
}

/// The default of `runtime.keep_freed_memory_s`, one hour: bulk work that recurs every few
/// minutes reuses its memory without page faults; after a quiet hour the process is back down
/// to what it holds.
pub const DEFAULT_KEEP_FREED_MEMORY_S: u64 = 3600;
/// The largest `runtime.keep_freed_memory_s`: one day.
pub const MAX_KEEP_FREED_MEMORY_S: u64 = 86_400;

impl Default for Runtime {
    fn default() -> Self {
        Runtime {
            workers: 0,
            keep_freed_memory_s: DEFAULT_KEEP_FREED_MEMORY_S,
        }
    }
}

impl Runtime {
    /// The worker threads to start: the setting, or, when it is 0, one fewer than the CPUs
    /// this process may use, and at least one. The store's writer and applier threads and the
    /// blocking pool (large searches) run beside the workers; on a 2-CPU machine two workers
    /// plus those threads were slower than one (docs/design.md, "Connections").
    pub fn worker_threads(&self) -> usize {
        if self.workers > 0 {
            return self.workers;
        }
        std::thread::available_parallelism()
            .map(|n| n.get().saturating_sub(1))
            .unwrap_or(1)
            .max(1)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Storage {
    /// Pages the store keeps in memory (its read cache), MiB. The operating system's page
    /// cache holds the data file as well.
    pub cache_mb: u64,
    /// Redo-log MiB after which a checkpoint makes the store file durable and starts the log
    /// over (also every 30 s under writes, and after 500 ms without writes).
    pub checkpoint_mb: u64,
    /// Memory for key runs graph searches read again and again (adjacency of one type, index
    /// entries of one value), MiB; 0 turns it off (docs/design.md "Key memo").
    pub key_memo_mb: u64,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            cache_mb: crate::store::DEFAULT_CACHE_MB,
            checkpoint_mb: crate::store::DEFAULT_CHECKPOINT_MB,
            key_memo_mb: crate::store::memo::DEFAULT_KEY_MEMO_MB,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Listen {
    pub http: String,
    pub grpc: String,
    pub pg: String,
    pub bolt: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request body, bytes (413 above it).
    pub max_body_bytes: u64,
    /// Deepest JSON nesting of a request body (400 above it; at most 128).
    pub max_json_depth: usize,
    /// Time budget of one request, milliseconds (408 when exceeded).
    pub request_timeout_ms: u64,
    /// Largest `hops` a traversal block may ask for (BEHAVIOUR.md §2: 10 by default).
    pub max_hops: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rest {
    /// `spec` (list results as `data: {data, total}`) or `flat` (`data: [...], total`).
    pub envelope: String,
}

impl Default for FileConfig {
    fn default() -> Self {
        FileConfig {
            schema_version: CONFIG_SCHEMA_VERSION,
            data_dir: PathBuf::from("./data"),
            multitenant: false,
            listen: Listen::default(),
            limits: Limits::default(),
            rest: Rest::default(),
            storage: Storage::default(),
            runtime: Runtime::default(),
        }
    }
}

impl Default for Listen {
    fn default() -> Self {
        Listen {
            http: "127.0.0.1:3000".into(),
            grpc: "127.0.0.1:50051".into(),
            pg: "127.0.0.1:5433".into(),
            bolt: "127.0.0.1:7687".into(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 32 * 1024 * 1024,
            max_json_depth: 64,
            request_timeout_ms: 30_000,
            max_hops: 10,
        }
    }
}

impl Default for Rest {
    fn default() -> Self {
        Rest {
            envelope: "spec".into(),
        }
    }
}

impl FileConfig {
    /// Reads a config file. Settings missing from it take their defaults.
    pub fn load(path: &Path) -> Result<FileConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{e} (config file {})", path.display()))
    }

    pub fn parse(text: &str) -> Result<FileConfig, String> {
        let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        let version = table.get("schema_version");
        match version.and_then(toml::Value::as_integer) {
            Some(CONFIG_SCHEMA_VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "config version mismatch: the file has schema_version {v}; this build uses schema_version {CONFIG_SCHEMA_VERSION}"
                ))
            }
            // Present but not an integer (`1.0`, `"1"`): named as it is written.
            None if version.is_some() => {
                return Err(format!(
                    "config version mismatch: the file has schema_version {}, not an integer; this build uses schema_version {CONFIG_SCHEMA_VERSION}",
                    version.map(toml::Value::to_string).unwrap_or_default()
                ))
            }
            None => {
                return Err(format!(
                    "config version mismatch: the file has no schema_version; this build uses schema_version {CONFIG_SCHEMA_VERSION}"
                ))
            }
        }
        let cfg: FileConfig = table
            .try_into()
            .map_err(|e: toml::de::Error| e.to_string().trim_end().to_string())?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), String> {
        /// One request's time budget at most: past an hour a stuck request is not told from
        /// a slow one.
        const MAX_REQUEST_TIMEOUT_MS: u64 = 3_600_000;
        if self.rest.envelope != "spec" && self.rest.envelope != "flat" {
            return Err(format!(
                "rest.envelope (--rest-envelope) must be \"spec\" or \"flat\", not {:?}",
                self.rest.envelope
            ));
        }
        if !(1..=100).contains(&self.limits.max_hops) {
            return Err("limits.max_hops must be between 1 and 100".into());
        }
        if !(1..=128).contains(&self.limits.max_json_depth) {
            return Err("limits.max_json_depth must be between 1 and 128".into());
        }
        if !(16..=1 << 20).contains(&self.storage.cache_mb) {
            return Err("storage.cache_mb must be between 16 and 1048576".into());
        }
        if !(1..=4096).contains(&self.storage.checkpoint_mb) {
            return Err("storage.checkpoint_mb must be between 1 and 4096".into());
        }
        if self.storage.key_memo_mb > 1 << 20 {
            return Err("storage.key_memo_mb must be between 0 and 1048576".into());
        }
        if self.runtime.workers > 1024 {
            return Err("runtime.workers (--workers, ENGINE_WORKERS) must be between 0 (automatic) and 1024".into());
        }
        if self.runtime.keep_freed_memory_s > MAX_KEEP_FREED_MEMORY_S {
            return Err(format!(
                "runtime.keep_freed_memory_s (--keep-freed-memory-s, ENGINE_KEEP_FREED_MEMORY_S) must be between 0 and {MAX_KEEP_FREED_MEMORY_S} (one day)"
            ));
        }
        if self.limits.max_body_bytes == 0 {
            return Err("limits.max_body_bytes (--max-body-bytes) must be positive".into());
        }
        if !(1..=MAX_REQUEST_TIMEOUT_MS).contains(&self.limits.request_timeout_ms) {
            return Err(format!(
                "limits.request_timeout_ms must be between 1 and {MAX_REQUEST_TIMEOUT_MS} (one hour)"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_equals_the_defaults() {
        let example = FileConfig::parse(include_str!("../packaging/engine.toml")).unwrap();
        assert_eq!(example, FileConfig::default());
    }

    #[test]
    fn schema_version_is_checked_and_missing_settings_default() {
        assert!(FileConfig::parse("schema_version = 2")
            .unwrap_err()
            .starts_with("config version mismatch"));
        assert!(FileConfig::parse("data_dir = \"x\"")
            .unwrap_err()
            .starts_with("config version mismatch"));
        for wrong in ["schema_version = 1.0", "schema_version = \"1\""] {
            let e = FileConfig::parse(wrong).unwrap_err();
            assert!(e.contains("not an integer"), "{e}");
        }
        let c = FileConfig::parse("schema_version = 1\n[listen]\nhttp = \"127.0.0.1:0\"").unwrap();
        assert_eq!(c.listen.http, "127.0.0.1:0");
        assert_eq!(c.listen.grpc, Listen::default().grpc);
        assert!(FileConfig::parse("schema_version = 1\ntoken = \"x\"").is_err());
    }

    #[test]
    fn workers_default_to_one_fewer_than_the_cpus() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(Runtime::default().worker_threads(), (cpus - 1).max(1));
        let c = FileConfig::parse("schema_version = 1\n[runtime]\nworkers = 3").unwrap();
        assert_eq!(c.runtime.worker_threads(), 3);
        assert!(
            FileConfig::parse("schema_version = 1\n[runtime]\nworkers = 5000")
                .unwrap_err()
                .contains("runtime.workers")
        );
    }

    #[test]
    fn freed_memory_is_kept_an_hour_by_default_and_at_most_a_day() {
        assert_eq!(Runtime::default().keep_freed_memory_s, 3600);
        let c =
            FileConfig::parse("schema_version = 1\n[runtime]\nkeep_freed_memory_s = 0").unwrap();
        assert_eq!(c.runtime.keep_freed_memory_s, 0);
        let e = FileConfig::parse("schema_version = 1\n[runtime]\nkeep_freed_memory_s = 86401")
            .unwrap_err();
        assert!(e.contains("runtime.keep_freed_memory_s"), "{e}");
    }
}
