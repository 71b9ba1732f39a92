//! The Lua scripts of `lua/`, one per algorithm, each prefixed with `lua/common.lua`; embedded
//! at build time, their SHA1s computed once. Every call is EVALSHA of one of these.

use crate::limit::Algorithm;

const COMMON: &str = include_str!("../../../lua/common.lua");

/// One script: its code and the SHA1 that EVALSHA names it by.
pub struct Script {
    code: String,
    sha1: String,
}

impl Script {
    fn new(code: String) -> Script {
        let sha1 = redis::Script::new(&code).get_hash().to_string();
        Script { code, sha1 }
    }

    /// The Lua code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The SHA1 of the code, hexadecimal.
    pub fn sha1(&self) -> &str {
        &self.sha1
    }
}

/// The five scripts, by algorithm.
pub struct Scripts {
    fixed_window: Script,
    sliding_window_log: Script,
    sliding_window_counter: Script,
    token_bucket: Script,
    leaky_bucket: Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        let with_common = |body: &str| Script::new(format!("{COMMON}{body}"));
        Scripts {
            fixed_window: with_common(include_str!("../../../lua/fixed_window.lua")),
            sliding_window_log: with_common(include_str!("../../../lua/sliding_window_log.lua")),
            sliding_window_counter: with_common(include_str!(
                "../../../lua/sliding_window_counter.lua"
            )),
            token_bucket: with_common(include_str!("../../../lua/token_bucket.lua")),
            leaky_bucket: with_common(include_str!("../../../lua/leaky_bucket.lua")),
        }
    }

    /// The script of `algorithm`.
    pub fn get(&self, algorithm: Algorithm) -> &Script {
        match algorithm {
            Algorithm::FixedWindow => &self.fixed_window,
            Algorithm::SlidingWindowLog => &self.sliding_window_log,
            Algorithm::SlidingWindowCounter => &self.sliding_window_counter,
            Algorithm::TokenBucket => &self.token_bucket,
            Algorithm::LeakyBucket => &self.leaky_bucket,
        }
    }

    /// `SCRIPT LOAD` commands for every script (Redis Cluster sends them to every primary).
    pub fn load_commands(&self) -> Vec<redis::Cmd> {
        Algorithm::ALL
            .into_iter()
            .map(|algorithm| {
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(&self.get(algorithm).code);
                load
            })
            .collect()
    }
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts::new()
    }
}
