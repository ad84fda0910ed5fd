//! Cost of verifying a capability token (issue 7 asks for the per-request overhead):
//! `cargo bench --bench token_verify`. Prints µs per verification of the published test
//! vector (base64url decode, HMAC-SHA256, claims parse), the median of 5 runs.

use std::time::Instant;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}

fn main() {
    let secret = engine::auth::decode_hex(
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
    )
    .unwrap();
    let token = "eyJzdWIiOiJ0ZXN0Iiwic2NvcGUiOiJyZWFkIHdyaXRlIiwidGVuYW50IjoiYWNtZSIsImlhdCI6MTcwMDAwMDAwMCwiZXhwIjo0MTAyNDQ0ODAwfQ.FhCdfmQZnnKa7cn4LVSOfqvhlsSUOj-aMpj1JcEPg1c";
    let n = 200_000;
    let mut runs = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..n {
            let c = engine::auth::verify(&secret, std::hint::black_box(token), 1_800_000_000);
            assert!(c.is_ok());
        }
        runs.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    println!(
        "capability token verify: {:.3} us per request (median of 5 x {n})",
        median(runs)
    );
}
