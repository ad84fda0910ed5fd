//! Physical reference for durable-write benchmarks: one thread appends a ~100-byte record to
//! a file and calls fdatasync (File::sync_data) after every append, for N seconds. The rate
//! is the best a one-fsync-per-write design can do on this disk.
//!
//!   fsync_loop --dir DIR [--seconds N]
//!
//! Prints `fsync_loop ops=COUNT seconds=S ops_per_sec=R p50_us=.. p99_us=.. max_us=..`.
//! Uses only std. The file is removed at the end.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn main() {
    let mut dir: Option<PathBuf> = None;
    let mut seconds: f64 = 5.0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dir" => dir = Some(PathBuf::from(args.next().expect("--dir needs a value"))),
            "--seconds" => {
                seconds = args
                    .next()
                    .expect("--seconds needs a value")
                    .parse()
                    .expect("--seconds: a number")
            }
            "--bench" => {}
            "-h" | "--help" => {
                println!("usage: fsync_loop --dir DIR [--seconds N]");
                return;
            }
            other => {
                eprintln!("fsync_loop: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    let dir = dir.unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&dir).expect("create --dir");
    let path = dir.join(format!("fsync_loop.{}.dat", std::process::id()));
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .expect("open file");
    // Make the file itself durable first so the loop measures data syncs, not the create.
    f.sync_all().expect("sync_all");
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }

    let mut rec = [b'x'; 100];
    rec[99] = b'\n';
    let limit = Duration::from_secs_f64(seconds);
    let mut lat_us: Vec<u32> = Vec::with_capacity(1 << 16);
    let start = Instant::now();
    let mut n: u64 = 0;
    loop {
        let t = Instant::now();
        let tag = n.to_le_bytes();
        rec[..8].copy_from_slice(&tag);
        f.write_all(&rec).expect("write");
        f.sync_data().expect("fdatasync");
        lat_us.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
        n += 1;
        if start.elapsed() >= limit {
            break;
        }
    }
    let el = start.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    lat_us.sort_unstable();
    let pct = |p: f64| lat_us[((lat_us.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "fsync_loop ops={n} seconds={el:.3} ops_per_sec={:.1} p50_us={} p99_us={} max_us={}",
        n as f64 / el,
        pct(0.50),
        pct(0.99),
        lat_us[lat_us.len() - 1]
    );
}
