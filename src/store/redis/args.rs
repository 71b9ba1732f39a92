//! The arguments of every algorithm script, built in one place in the order `lua/common.lua`
//! reads them. A test checks that order and count against the header of `lua/common.lua`.

use redis::Cmd;

/// The ARGV of one script call, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptArgs {
    /// L.
    pub requests_per_unit: u32,
    /// W, unit x unit_multiplier, in microseconds.
    pub period_us: u64,
    /// The cost of the hit; 0 only reads.
    pub cost: u64,
    /// The bucket capacity (burst); L for the window algorithms.
    pub capacity: u64,
    /// sluice's clock; `None`: the script reads Redis TIME.
    pub now_us: Option<u64>,
    /// A value unique to the hit, for algorithms that store members (`needs_nonce`).
    pub nonce: Option<String>,
}

impl ScriptArgs {
    /// The names of ARGV[1], ARGV[2], ... as `lua/common.lua` lists them.
    pub const NAMES: [&'static str; 6] = [
        "requests_per_unit",
        "period_us",
        "cost",
        "capacity",
        "now_us",
        "nonce",
    ];

    /// `command` (EVALSHA or EVAL) of `script` (its SHA1 or its code) on the one `key`.
    pub fn call(&self, command: &str, script: &str, key: &str) -> Cmd {
        // Sized once: the command, the script, the key count, the key, then the arguments
        // (short numbers besides the nonce).
        let mut call = Cmd::with_capacity(
            4 + Self::NAMES.len(),
            command.len() + script.len() + key.len() + 96,
        );
        call.arg(command).arg(script).arg(1).arg(key);
        self.append_to(&mut call);
        call
    }

    /// Appends the arguments, in `NAMES` order; absent values are sent empty.
    fn append_to(&self, call: &mut Cmd) {
        call.arg(self.requests_per_unit)
            .arg(self.period_us)
            .arg(self.cost)
            .arg(self.capacity);
        match self.now_us {
            Some(now_us) => call.arg(now_us),
            None => call.arg(""),
        };
        call.arg(self.nonce.as_deref().unwrap_or(""));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::Algorithm;

    const COMMON: &str = include_str!("../../../lua/common.lua");

    fn args() -> ScriptArgs {
        ScriptArgs {
            requests_per_unit: 10,
            period_us: 60_000_000,
            cost: 1,
            capacity: 10,
            now_us: Some(5),
            nonce: Some("n-1".into()),
        }
    }

    /// Every argument sent has its line in the header of `lua/common.lua`, in order, and
    /// the header lists no argument that is not sent.
    #[test]
    fn the_arguments_match_the_header_of_common_lua() {
        let mut call = Cmd::new();
        args().append_to(&mut call);
        assert_eq!(call.args_iter().count(), ScriptArgs::NAMES.len());
        for (index, name) in ScriptArgs::NAMES.iter().enumerate() {
            let line = format!("--   ARGV[{}]  {name} ", index + 1);
            assert!(COMMON.contains(&line), "lua/common.lua lacks `{line}`");
        }
        let past_the_end = format!("ARGV[{}]", ScriptArgs::NAMES.len() + 1);
        assert!(
            !COMMON.contains(&past_the_end),
            "{past_the_end} is never sent"
        );
    }

    /// No script reads an argument that is not sent.
    #[test]
    fn no_script_reads_past_the_arguments() {
        for &algorithm in Algorithm::ALL {
            let source = algorithm.lua_source();
            for index in ScriptArgs::NAMES.len() + 1..=ScriptArgs::NAMES.len() + 4 {
                let argument = format!("ARGV[{index}]");
                assert!(!source.contains(&argument), "{algorithm} reads {argument}");
            }
        }
    }

    #[test]
    fn a_call_names_the_script_and_its_one_key_first() {
        let call = args().call("EVALSHA", "abc", "k");
        let sent: Vec<Vec<u8>> = call
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        let text: Vec<&str> = sent
            .iter()
            .map(|b| std::str::from_utf8(b).unwrap_or("?"))
            .collect();
        assert_eq!(
            text,
            ["EVALSHA", "abc", "1", "k", "10", "60000000", "1", "10", "5", "n-1"]
        );
    }
}
