//! A script call as the connection it goes on takes it. sluice's own connection appends the
//! call's RESP bytes to its next write; redis-rs sends a `Cmd`. A call that writes its own
//! arguments (`Args`) goes into the former directly, without building a `Cmd` first.

use redis::{Cmd, RedisWrite};
use smallvec::SmallVec;

/// A script call's reply: a list of integers, kept inline when short (most are).
pub(super) type Integers = SmallVec<[i64; 8]>;

/// A command either connection can send.
pub(super) trait Command: Send {
    /// Appends the command to `out` as RESP: an array of bulk strings.
    fn write_resp(&self, out: &mut Vec<u8>);

    /// The command as redis-rs sends it.
    fn into_cmd(self) -> Cmd;
}

impl Command for Cmd {
    fn write_resp(&self, out: &mut Vec<u8>) {
        self.write_packed_command(out);
    }

    fn into_cmd(self) -> Cmd {
        self
    }
}

/// Where a command's arguments are written, in order.
pub(super) trait Args {
    fn bytes(&mut self, arg: &[u8]);

    fn number(&mut self, n: u64) {
        self.bytes(itoa::Buffer::new().format(n).as_bytes());
    }
}

impl Args for Cmd {
    fn bytes(&mut self, arg: &[u8]) {
        self.write_arg(arg);
    }
}

/// Arguments written as RESP bulk strings after their array's header.
pub(super) struct Resp<'a>(&'a mut Vec<u8>);

impl<'a> Resp<'a> {
    /// The array of `count` arguments, whose header is written now: exactly `count` must
    /// follow. (The buffer of a connection's writes keeps its size from one write to the
    /// next, so it seldom grows.)
    pub(super) fn array(out: &'a mut Vec<u8>, count: usize) -> Resp<'a> {
        header(out, b'*', count);
        Resp(out)
    }
}

impl Args for Resp<'_> {
    fn bytes(&mut self, arg: &[u8]) {
        header(self.0, b'$', arg.len());
        self.0.extend_from_slice(arg);
        self.0.extend_from_slice(b"\r\n");
    }
}

/// `*<n>\r\n` or `$<n>\r\n`, in one append.
fn header(out: &mut Vec<u8>, kind: u8, n: usize) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n).as_bytes();
    let mut line = [0; 24];
    line[0] = kind;
    line[1..=digits.len()].copy_from_slice(digits);
    line[digits.len() + 1..digits.len() + 3].copy_from_slice(b"\r\n");
    out.extend_from_slice(&line[..digits.len() + 3]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_writes_what_redis_rs_packs() {
        let write = |out: &mut dyn FnMut(&[u8], Option<u64>)| {
            out(b"FCALL", None);
            out(b"", None);
            out(b"", Some(0));
            out(b"", Some(u64::MAX));
            out("kéy:\r\n".as_bytes(), None);
        };
        let mut cmd = Cmd::new();
        write(&mut |bytes, number| match number {
            Some(n) => cmd.number(n),
            None => cmd.bytes(bytes),
        });
        let mut out = b"before".to_vec();
        let mut resp = Resp::array(&mut out, 5);
        write(&mut |bytes, number| match number {
            Some(n) => resp.number(n),
            None => resp.bytes(bytes),
        });
        assert_eq!(&out[..6], b"before");
        assert_eq!(out[6..], cmd.get_packed_command());
    }
}
