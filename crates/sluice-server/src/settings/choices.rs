//! The values of the flags that choose among a domain's options (`--failure-mode`,
//! `--redis-type`, ...): clap's view of each option lives here, so that domain modules know
//! nothing of the command line. `choice!` declares one, variant for variant, with its
//! conversion into the domain's own enum.

use clap::ValueEnum;

use crate::rlqs::DefaultAction;
use sluice_core::modifier::on_store_failure::Policy;
use sluice_limiter::HeaderForm;
use sluice_store::redis::{RedisKind, TimeSource};

/// A flag's choice of `$domain`: the same variants, with the help clap shows for each.
macro_rules! choice {
    ($(#[$doc:meta])* $name:ident => $domain:ident { $( $(#[$help:meta])* $variant:ident ),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
        pub enum $name {
            $( $(#[$help])* $variant, )+
        }

        impl From<$name> for $domain {
            fn from(choice: $name) -> $domain {
                match choice {
                    $( $name::$variant => $domain::$variant, )+
                }
            }
        }
    };
}

choice! {
    /// `--failure-mode`.
    FailureModeChoice => Policy {
        /// gRPC UNAVAILABLE with the reason: Envoy's `failure_mode_deny` decides.
        Unavailable,
        /// Every charged descriptor is OK (fail open).
        Allow,
        /// Every charged descriptor is OVER_LIMIT (fail closed).
        Deny,
        /// Each limit decided in this replica alone, on its share: the limit divided by the
        /// replica count (--store-replicas, else learnt from Redis).
        LocalShare,
    }
}

choice! {
    /// `--response-headers-form`.
    HeaderFormChoice => HeaderForm {
        /// `RateLimit-Limit: 10`, as envoyproxy/ratelimit writes it.
        Reference,
        /// `RateLimit-Limit: 10, 10;w=60`: the limit and its quota policy (the window in
        /// seconds), as the IETF RateLimit header fields draft describes.
        QuotaPolicy,
    }
}

choice! {
    /// `--rlqs-default-action`.
    DefaultActionChoice => DefaultAction {
        /// Allow all.
        Allow,
        /// Deny all.
        Deny,
    }
}

choice! {
    /// `--redis-type` and `--redis-persecond-type`.
    RedisKindChoice => RedisKind {
        Single,
        Cluster,
        Sentinel,
    }
}

choice! {
    /// `--redis-time`.
    TimeSourceChoice => TimeSource {
        /// Redis `TIME` inside the scripts: one clock for every sluice replica.
        Redis,
        /// sluice's clock, passed as an argument (for Redis services that refuse TIME).
        Sluice,
    }
}
