//! The code tonic-prost-build generates from `proto/`, one module per package.

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

/// sluice's own admin API (docs/admin.md).
pub mod sluice {
    pub mod admin {
        pub mod v1 {
            tonic::include_proto!("sluice.admin.v1");
        }
    }
}

/// Kuadrant's rate limit protocol, as Limitador serves it (docs/kuadrant.md).
pub mod kuadrant {
    pub mod service {
        pub mod ratelimit {
            pub mod v1 {
                tonic::include_proto!("kuadrant.service.ratelimit.v1");
            }
        }
    }
}
