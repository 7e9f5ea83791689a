//! Build script: compiles `felixbackend.proto` without a system `protoc`.
//!
//! `protox` parses the file into a descriptor set; `prost-build` turns that
//! into Rust message types and `pbjson-build` adds serde impls that follow
//! the proto3 canonical JSON mapping. Map fields become `BTreeMap` so that
//! both binary and JSON output are deterministic.

use std::error::Error;
use std::path::PathBuf;

use prost::Message;

const PROTO: &str = "felixbackend.proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    println!("cargo:rerun-if-changed=build.rs");

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    let fds = protox::compile([PROTO], ["."])?;
    let descriptor_bytes = fds.encode_to_vec();
    std::fs::write(out_dir.join("felixbackend.bin"), &descriptor_bytes)?;

    prost_build::Config::new()
        .out_dir(&out_dir)
        .btree_map(["."])
        .compile_fds(fds)?;

    pbjson_build::Builder::new()
        .out_dir(&out_dir)
        .register_descriptors(&descriptor_bytes)?
        .btree_map(["."])
        // Hand-written in src/route_update_json.rs: `types` is a bitmap.
        .exclude([".felix.RouteUpdate"])
        .build(&[".felix"])?;

    Ok(())
}
