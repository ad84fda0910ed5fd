//! A tonic client against the real binary's gRPC listener (port 0): Execute, ExecuteStream
//! and the status mapping of a bad credential.

use engine::wire::grpc::pb::{engine_client::EngineClient, Envelope};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::Stdio;

struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(dir: &std::path::Path) -> (Server, String) {
    let mut child = crate::serve_command(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start engine");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let grpc = lines
        .next()
        .unwrap()
        .unwrap()
        .strip_prefix("listening grpc ")
        .expect("first line names the gRPC listener")
        .to_string();
    assert!(lines
        .next()
        .unwrap()
        .unwrap()
        .starts_with("listening http "));
    (Server(child), format!("http://{grpc}"))
}

fn envelope(op: Value) -> tonic::Request<Envelope> {
    let mut r = tonic::Request::new(Envelope {
        protocol_version: 1,
        context: None,
        operation_json: op.to_string(),
    });
    r.metadata_mut()
        .insert("authorization", "Bearer dev-token".parse().unwrap());
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tonic_client_executes_streams_and_sees_status_codes() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, url) = start(dir.path());
    let mut client = EngineClient::connect(url).await.unwrap();
    for i in 0..3 {
        let op = json!({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "create",
            "label": "T", "properties": {"i": i}}});
        let r = client.execute(envelope(op)).await.unwrap().into_inner();
        let v: Value = serde_json::from_str(&r.response_json).unwrap();
        assert_eq!(v["record"]["properties"]["i"], i);
    }
    let q = json!({"kind": "query", "query": {"kind": "records", "query": {"labels": ["T"], "order": {"i": "asc"}}}});
    let mut stream = client
        .execute_stream(envelope(q))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Vec::new();
    while let Some(batch) = stream.message().await.unwrap() {
        for r in batch.records_json {
            let v: Value = serde_json::from_str(&r).unwrap();
            seen.push(v["properties"]["i"].as_i64().unwrap());
        }
    }
    assert_eq!(seen, [0, 1, 2]);
    let mut bad = envelope(json!({"kind": "query", "query": {"kind": "records", "query": {}}}));
    bad.metadata_mut()
        .insert("authorization", "Bearer nope".parse().unwrap());
    let err = client.execute(bad).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    // The engine code: in the x-error-code trailer, and as the reason of the details'
    // google.rpc.ErrorInfo (the details are a google.rpc.Status).
    assert_eq!(
        err.metadata().get("x-error-code").unwrap(),
        "unauthenticated"
    );
    let details = err.details();
    let has = |needle: &[u8]| details.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"type.googleapis.com/google.rpc.ErrorInfo") && has(b"unauthenticated"));
}
