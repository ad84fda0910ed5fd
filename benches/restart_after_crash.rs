//! Restart time after kill -9 on a large store.
//!
//!   cargo bench --bench restart_after_crash -- [RECORDS] [ENGINE_BIN]
//!
//! 1. Loads RECORDS (default 1,000,000) records of 8 properties into a fresh store in a
//!    temporary directory, through the store's writer (batches of 1,000 creates).
//! 2. Starts ENGINE_BIN (default target/release/engine) on it, keeps 16 clients writing over
//!    HTTP, and kills it with SIGKILL mid-write.
//! 3. Restarts the engine and times spawn -> `listening http` (what an operator waits for),
//!    then checks the store answers reads.

use engine::model::{infer::PropWrites, PropType, PropValue, Scalar};
use engine::store::records::{PutMode, PutRecord, WriteOp};
use engine::store::{Store, TenancyMode, Tenant};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn record(i: u64) -> WriteOp {
    let mut p = PropWrites::new();
    let s = |v: &str| Some(PropValue::scalar(PropType::String, Scalar::Str(v.into())));
    let n = |v: i64| Some(PropValue::scalar(PropType::Number, Scalar::Int(v)));
    p.insert(
        "status".into(),
        s(["paid", "open", "void"][(i % 3) as usize]),
    );
    p.insert("total".into(), n((i % 9973) as i64));
    p.insert(
        "city".into(),
        s(["Oslo", "Lima", "Pune", "Kyiv"][(i % 4) as usize]),
    );
    p.insert(
        "createdAt".into(),
        Some(PropValue::scalar(
            PropType::Datetime,
            Scalar::Str("2026-01-01T10:00:00Z".into()),
        )),
    );
    p.insert("qty".into(), n((i % 17) as i64));
    p.insert("sku".into(), s(&format!("sku-{}", i % 5000)));
    p.insert("channel".into(), s(["web", "app"][(i % 2) as usize]));
    p.insert("seq".into(), n(i as i64));
    WriteOp::Put(PutRecord {
        id: uuid::Uuid::now_v7(),
        mode: PutMode::Create,
        label: Some(["ORDER", "ITEM", "CUSTOMER"][(i % 3) as usize].into()),
        props: p,
    })
}

fn start(bin: &str, dir: &std::path::Path) -> (Child, String, Duration) {
    let t = Instant::now();
    let mut child = Command::new(bin)
        .args(["serve", "--http-addr", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn engine");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        line.starts_with("listening http"),
        "engine did not start: {line:?}"
    );
    (child, addr, t.elapsed())
}

fn post(addr: &str, body: &str) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let req = format!(
        "POST /api/v1/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer dev-token\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.starts_with("HTTP/1.1 201")
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let n: u64 = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let bin = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "target/release/engine".into());
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = Instant::now();
    {
        let store = Store::open(dir.path(), TenancyMode::Single).unwrap();
        rt.block_on(async {
            let mut i = 0;
            while i < n {
                let batch: Vec<_> = (i..(i + 1000).min(n)).map(record).collect();
                store.write(Tenant::Single, batch).await.unwrap();
                i += 1000;
            }
        });
    }
    let load = t.elapsed();
    let size = std::fs::metadata(dir.path().join("engine.redb"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "loaded {n} records in {:.1} s ({:.0} records/s), store {:.0} MiB",
        load.as_secs_f64(),
        n as f64 / load.as_secs_f64(),
        size as f64 / 1048576.0
    );

    let (clean_child, _, clean_start) = start(&bin, dir.path());
    let mut clean_child = clean_child;
    unsafe_sigterm(&clean_child);
    let _ = clean_child.wait();
    println!(
        "start after clean shutdown: {:.3} s",
        clean_start.as_secs_f64()
    );

    let (mut child, addr, _) = start(&bin, dir.path());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writers: Vec<_> = (0..16)
        .map(|_| {
            let (addr, stop, acked) = (addr.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if post(
                        &addr,
                        r#"{"label":"ORDER","data":{"status":"paid","total":1}}"#,
                    ) {
                        acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        let _ = w.join();
    }
    let (mut child, addr, restart) = start(&bin, dir.path());
    println!(
        "kill -9 during writes ({} acknowledged creates), restart to listening: {:.3} s",
        acked.load(std::sync::atomic::Ordering::Relaxed),
        restart.as_secs_f64()
    );
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"POST /api/v1/labels/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer dev-token\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    println!(
        "labels after restart: {}",
        out.lines().last().unwrap_or_default()
    );
    unsafe_sigterm(&child);
    let _ = child.wait();
}

fn unsafe_sigterm(child: &Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
}
