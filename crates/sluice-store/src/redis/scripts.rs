//! The one script of the Redis store: `lua/common.lua`, then every algorithm's script of `lua/`
//! (the registry in `algorithm` names them), then every modifier's that has one
//! (`Modifiers::LUA_SOURCES`, in registry order), then the request driver `lua/request.lua`, which defines `request(KEYS, ARGV)`. Built twice from the same code, at build time:
//! - a function library (Redis 7+): loaded with FUNCTION LOAD and called with FCALL. Its top
//!   level (every helper and algorithm) runs once, when it is loaded, so a call runs only
//!   `request`: one hit costs 6.7 µs of Redis CPU where the script below costs 9.2 µs
//!   (redis-benchmark, 64 clients x 8 in flight);
//! - a script: loaded with SCRIPT LOAD, called with EVALSHA; for Redis before 7, and the
//!   retry that sends the code itself after the server lost it.
//!
//! The library also holds the plain counter (`lua/counter.lua`, `<function>_counter`), which
//! `counter.rs` calls for a request of one fixed-window hit; the library's name is the SHA1
//! of both, the script's of the script alone.
//!
//! Both are named by the script's SHA1, so replicas of different versions never call each
//! other's code. Each has a read-only twin, for a Redis that refuses writes (out of memory, a
//! read-only replica): the library's `<function>_ro`, flagged `no-writes` (called with
//! FCALL_RO), and a script sent whole with EVAL (only while Redis refuses writes).

use super::command::Encoded;
use sluice_core::limit::Algorithm;
use sluice_core::modifier::Modifiers;

const COMMON: &str = include_str!("../../../../lua/common.lua");
const REQUEST: &str = include_str!("../../../../lua/request.lua");
const COUNTER: &str = include_str!("../../../../lua/counter.lua");

/// The script and the function library, and their names.
pub struct Script {
    code: String,
    read_only_code: String,
    sha1: String,
    library: String,
    function: String,
    read_only_function: String,
    /// `FCALL` and the counter function, encoded once.
    counter_call: Encoded,
}

impl Script {
    /// The script of every algorithm the registry lists.
    pub fn new() -> Script {
        let mut body = String::from(COMMON);
        for algorithm in Algorithm::ALL {
            body.push('\n');
            body.push_str(algorithm.lua_source());
        }
        for modifier in Modifiers::LUA_SOURCES {
            body.push('\n');
            body.push_str(modifier);
        }
        body.push('\n');
        body.push_str(REQUEST);
        let code = format!("{body}\nreturn request(KEYS, ARGV)\n");
        let read_only_code = format!("{body}\nreturn request(KEYS, ARGV, true)\n");
        let sha1 = redis::Script::new(&code).get_hash().to_string();
        // The library's name covers the counter too: replicas of different versions never
        // call each other's functions.
        let library_hash = redis::Script::new(&format!("{code}{COUNTER}"))
            .get_hash()
            .to_string();
        let function = format!("sluice_{}", &library_hash[..16]);
        let read_only_function = format!("{function}_ro");
        let counter_function = format!("{function}_counter");
        let library = format!(
            "#!lua name={function}\n{body}\n{COUNTER}\n\
             redis.register_function('{function}', request)\n\
             redis.register_function{{function_name = '{read_only_function}', \
             callback = function(KEYS, ARGV) return request(KEYS, ARGV, true) end, \
             flags = {{'no-writes'}}}}\n\
             redis.register_function('{counter_function}', counter)\n"
        );
        Script {
            code,
            read_only_code,
            sha1,
            library,
            function,
            read_only_function,
            counter_call: Encoded::new(&[b"FCALL", counter_function.as_bytes()]),
        }
    }

    /// `FCALL` of the library's plain counter function (`lua/counter.lua`), the arguments
    /// every counter call starts with.
    pub fn counter_call(&self) -> &Encoded {
        &self.counter_call
    }

    /// The Lua code of the script.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The Lua code of the read-only script.
    pub fn read_only_code(&self) -> &str {
        &self.read_only_code
    }

    /// The name of the library's read-only function.
    pub fn read_only_function(&self) -> &str {
        &self.read_only_function
    }

    /// The SHA1 of the script's code, hexadecimal.
    pub fn sha1(&self) -> &str {
        &self.sha1
    }

    /// The name of the library's function (and of the library).
    pub fn function(&self) -> &str {
        &self.function
    }

    /// `SCRIPT LOAD` of the script (Redis Cluster sends it to every primary).
    pub fn load_command(&self) -> redis::Cmd {
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(&self.code);
        load
    }

    /// `FUNCTION LOAD REPLACE` of the library (Redis Cluster sends it to every primary).
    pub fn load_library_command(&self) -> redis::Cmd {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(&self.library);
        load
    }
}

impl Default for Script {
    fn default() -> Self {
        Script::new()
    }
}
