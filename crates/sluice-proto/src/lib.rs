//! The Rust types of `proto/` (Envoy's RLS v3 subset, the xDS client's messages and the
//! reference's rate limit config resource), generated at build time, and the
//! encoded descriptor set that gRPC reflection serves.
//! `codec` is the gRPC codec the services use; `wire` decodes RLQS usage reports by hand.

pub mod codec;
mod generated;
pub mod wire;

pub use generated::*;

pub use envoy::extensions::common::ratelimit::v3::{rate_limit_descriptor, RateLimitDescriptor};
pub use envoy::service::ratelimit::v3::{
    rate_limit_response, rate_limit_service_server, RateLimitRequest, RateLimitResponse,
};

/// The encoded `FileDescriptorSet` of `proto/`, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("sluice_descriptor");
