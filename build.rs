//! Compiles `proto/` (Envoy's RLS v3 and RLQS API subsets, the xDS client's messages and the
//! reference's rate limit config resource, sluice's admin API, Kuadrant's protocol) with a
//! vendored protoc and writes the descriptor set that gRPC reflection serves.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let includes = protoc_bin_vendored::include_path()?;
    // tonic-prost-build finds protoc through PROTOC.
    env::set_var("PROTOC", protoc);
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    // The crate that runs this script is crates/sluice-proto; proto/ is at the workspace's top.
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../..");
    let proto = root.join("proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .file_descriptor_set_path(out_dir.join("sluice_descriptor.bin"))
        // Prost's encoding with smaller per-stream buffers (crates/sluice-proto/src/codec.rs).
        .codec_path("crate::codec::Codec")
        // RLQS usage reports come in two forms (crates/sluice-proto/src/wire.rs decodes both).
        .extern_path(
            ".envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports",
            "crate::wire::UsageReports",
        )
        .compile_protos(
            &[
                proto.join("envoy/service/ratelimit/v3/rls.proto"),
                proto.join("envoy/service/discovery/v3/ads.proto"),
                proto.join("ratelimit/config/ratelimit/v3/rls_conf.proto"),
                proto.join("envoy/service/rate_limit_quota/v3/rlqs.proto"),
                proto.join("sluice/admin/v1/admin.proto"),
                proto.join("kuadrant/service/ratelimit/v1/kuadrantrls.proto"),
            ],
            &[proto.clone(), includes],
        )?;
    println!("cargo:rerun-if-changed={}", proto.display());
    Ok(())
}
