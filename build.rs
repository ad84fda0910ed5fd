//! Compiles proto/engine/v1/engine.proto with a vendored protoc (no system protoc needed),
//! and writes the descriptor set gRPC reflection serves.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("engine_descriptor.bin"))
        .compile_protos(&["proto/engine/v1/engine.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/engine/v1/engine.proto");
    Ok(())
}
