//! Startup refusals that need a store written by hand: another storage format version.

use engine::store::keys::{Key, SYS_FORMAT};
use engine::store::kv::KV;
use engine::store::{codec, Store, TenancyMode, STORAGE_FORMAT_VERSION};

fn serve(dir: &std::path::Path) -> std::process::Output {
    crate::serve_command(dir).output().expect("run engine")
}

/// A store stamped with another format version is refused at startup with SPEC.md's exact
/// message, and the store is left untouched.
#[test]
fn refuses_another_storage_format_version() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), TenancyMode::Single).unwrap());
    let other = STORAGE_FORMAT_VERSION + 1;
    {
        let db = redb::Database::open(dir.path().join("engine.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(KV).unwrap();
            t.insert(
                Key::system(SYS_FORMAT).bytes(),
                codec::encode_u64(other).as_slice(),
            )
            .unwrap();
        }
        txn.commit().unwrap();
    }
    let out = serve(dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let want = format!("unsupported storage format version {other}; this build uses version {STORAGE_FORMAT_VERSION}");
    assert!(stderr.contains(&want), "stderr: {stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).is_empty(),
        "no listener may start"
    );
}

/// The tenancy mode is fixed at creation.
#[test]
fn refuses_to_switch_tenancy_mode() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), TenancyMode::Multi).unwrap());
    let out = serve(dir.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("multitenant mode") && stderr.contains("single-tenant mode"),
        "stderr: {stderr}"
    );
}
