//! Minimal structured-enough logging to stderr (stdout is reserved for the `listening` lines).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

fn emit(level: &str, msg: &str) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let _ = writeln!(std::io::stderr(), "{now} {level} {msg}");
}

pub fn info(msg: &str) {
    emit("INFO", msg)
}
pub fn warn(msg: &str) {
    emit("WARN", msg)
}
pub fn error(msg: &str) {
    emit("ERROR", msg)
}
