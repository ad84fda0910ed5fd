"""A Protocol v1 gRPC client in Python, its stubs generated from proto/ at run time.

    pip install grpcio==1.85.1 grpcio-tools==1.85.1
    python examples/grpc_client.py [127.0.0.1:50051] [token]

Creates a record, reads it back, searches, and streams every record of the label.
"""

import importlib
import json
import pathlib
import sys
import tempfile

import grpc
from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parents[1]


def generated():
    out = tempfile.mkdtemp(prefix="engine-grpc-")
    protoc.main(["protoc", f"-I{ROOT / 'proto'}", f"--python_out={out}", f"--grpc_python_out={out}",
                 str(ROOT / "proto" / "engine" / "v1" / "engine.proto")])
    sys.path.insert(0, out)
    return importlib.import_module("engine.v1.engine_pb2"), importlib.import_module("engine.v1.engine_pb2_grpc")


def main():
    target = sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051"
    token = sys.argv[2] if len(sys.argv) > 2 else "dev-token"
    pb2, pb2_grpc = generated()
    stub = pb2_grpc.EngineStub(grpc.insecure_channel(target))
    md = [("authorization", f"Bearer {token}")]

    def execute(op):
        r = stub.Execute(pb2.Envelope(protocol_version=1, operation_json=json.dumps(op)), metadata=md)
        return json.loads(r.response_json)

    rec = execute({"kind": "mutate", "mutation": {"kind": "putRecord", "mode": "create", "label": "MOVIE",
                                                 "properties": {"title": "Inception", "year": 2010}}})["record"]
    print("created", rec["id"])
    print("read", execute({"kind": "query", "query": {"kind": "record", "id": rec["id"]}})["record"]["properties"])
    found = execute({"kind": "query", "query": {"kind": "records", "query": {"labels": ["MOVIE"], "predicate": {"year": {"$gte": 2000}}}}})
    print("search total", found["total"])
    streamed = 0
    for batch in stub.ExecuteStream(pb2.Envelope(protocol_version=1, operation_json=json.dumps(
            {"kind": "query", "query": {"kind": "records", "query": {"labels": ["MOVIE"]}}})), metadata=md):
        streamed += len(batch.records_json)
    print("streamed", streamed, "records")


if __name__ == "__main__":
    main()
