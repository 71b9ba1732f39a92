//! The one script of the Redis store: `lua/common.lua`, then every algorithm's script of `lua/`
//! (the registry in `algorithm` names them), then the request driver `lua/request.lua`.
//! Embedded at build time, its SHA1 computed once. Every call is EVALSHA of it.

use crate::limit::Algorithm;

const COMMON: &str = include_str!("../../../lua/common.lua");
const REQUEST: &str = include_str!("../../../lua/request.lua");

/// The script: its code and the SHA1 that EVALSHA names it by.
pub struct Script {
    code: String,
    sha1: String,
}

impl Script {
    /// The script of every algorithm the registry lists.
    pub fn new() -> Script {
        let mut code = String::from(COMMON);
        for algorithm in Algorithm::ALL {
            code.push('\n');
            code.push_str(algorithm.lua_source());
        }
        code.push('\n');
        code.push_str(REQUEST);
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

    /// `SCRIPT LOAD` of the script (Redis Cluster sends it to every primary).
    pub fn load_command(&self) -> redis::Cmd {
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(&self.code);
        load
    }
}

impl Default for Script {
    fn default() -> Self {
        Script::new()
    }
}
