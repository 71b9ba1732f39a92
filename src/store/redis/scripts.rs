//! The Lua scripts of `lua/`, one per algorithm (the registry in `algorithm` names them), each
//! prefixed with `lua/common.lua`; embedded at build time, their SHA1s computed once. Every
//! call is EVALSHA of one of these.

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

/// Every algorithm's script, in registry order.
pub struct Scripts(Vec<Script>);

impl Scripts {
    pub fn new() -> Scripts {
        let scripts = Algorithm::ALL
            .iter()
            .map(|algorithm| Script::new(format!("{COMMON}{}", algorithm.lua_source())))
            .collect();
        Scripts(scripts)
    }

    /// The script of `algorithm`.
    pub fn get(&self, algorithm: Algorithm) -> &Script {
        &self.0[algorithm.index()]
    }

    /// `SCRIPT LOAD` commands for every script (Redis Cluster sends them to every primary).
    pub fn load_commands(&self) -> Vec<redis::Cmd> {
        self.0
            .iter()
            .map(|script| {
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(&script.code);
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
