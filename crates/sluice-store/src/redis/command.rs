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

    /// Arguments that every call of a kind starts with, and `encoded`, their RESP bytes
    /// (`Encoded`), which RESP takes whole.
    fn constant(&mut self, constant: &Encoded) {
        for arg in &constant.args {
            self.bytes(arg);
        }
    }
}

/// Arguments encoded as RESP bulk strings once, for the calls that all start with them.
pub(super) struct Encoded {
    args: Vec<Vec<u8>>,
    resp: Vec<u8>,
}

impl Encoded {
    pub(super) fn new(args: &[&[u8]]) -> Encoded {
        let mut resp = Vec::new();
        let mut writer = Resp(&mut resp);
        for arg in args {
            writer.bytes(arg);
        }
        Encoded {
            args: args.iter().map(|arg| arg.to_vec()).collect(),
            resp,
        }
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
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(count).as_bytes();
        out.push(b'*');
        out.extend_from_slice(digits);
        out.extend_from_slice(b"\r\n");
        Resp(out)
    }
}

impl Args for Resp<'_> {
    fn bytes(&mut self, arg: &[u8]) {
        let mut length = itoa::Buffer::new();
        let length = length.format(arg.len()).as_bytes();
        let out = &mut *self.0;
        out.push(b'$');
        out.extend_from_slice(length);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }

    /// A number's digits (at most 20, so their count is one or two digits); a single digit
    /// (a count of keys, a cost of 1) in one append.
    fn number(&mut self, n: u64) {
        if n < 10 {
            self.0
                .extend_from_slice(&[b'$', b'1', b'\r', b'\n', b'0' + n as u8, b'\r', b'\n']);
            return;
        }
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(n).as_bytes();
        let out = &mut *self.0;
        out.push(b'$');
        if digits.len() >= 10 {
            out.push(b'0' + (digits.len() / 10) as u8);
        }
        out.push(b'0' + (digits.len() % 10) as u8);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(digits);
        out.extend_from_slice(b"\r\n");
    }

    fn constant(&mut self, constant: &Encoded) {
        self.0.extend_from_slice(&constant.resp);
    }
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
            out(b"", Some(9));
            out(b"", Some(10));
            out(b"", Some(999_999_999));
            out(b"", Some(1_000_000_000));
            out(b"", Some(u64::MAX));
            out("kéy:\r\n".as_bytes(), None);
        };
        let mut cmd = Cmd::new();
        write(&mut |bytes, number| match number {
            Some(n) => cmd.number(n),
            None => cmd.bytes(bytes),
        });
        let mut out = b"before".to_vec();
        let mut resp = Resp::array(&mut out, 9);
        write(&mut |bytes, number| match number {
            Some(n) => resp.number(n),
            None => resp.bytes(bytes),
        });
        assert_eq!(&out[..6], b"before");
        assert_eq!(out[6..], cmd.get_packed_command());
    }
}
