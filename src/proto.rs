//! The Rust types of `proto/` (Envoy's RLS v3 subset, the xDS client's messages and the
//! reference's rate limit config resource), generated at build time, and the
//! encoded descriptor set that gRPC reflection serves.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

pub mod envoy {
    pub mod config {
        pub mod core {
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    pub mod extensions {
        pub mod common {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }
    pub mod r#type {
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
    pub mod service {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
        pub mod discovery {
            pub mod v3 {
                tonic::include_proto!("envoy.service.discovery.v3");
            }
        }
        pub mod rate_limit_quota {
            pub mod v3 {
                tonic::include_proto!("envoy.service.rate_limit_quota.v3");
            }
        }
    }
}

pub mod google {
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

/// envoyproxy/ratelimit's own API: the configuration resource it receives over xDS.
pub mod ratelimit {
    pub mod config {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("ratelimit.config.ratelimit.v3");
            }
        }
    }
}

pub use envoy::extensions::common::ratelimit::v3::{rate_limit_descriptor, RateLimitDescriptor};
pub use envoy::service::ratelimit::v3::{
    rate_limit_response, rate_limit_service_server, RateLimitRequest, RateLimitResponse,
};

/// The encoded `FileDescriptorSet` of `proto/`, for reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("sluice_descriptor");
