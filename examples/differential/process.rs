//! A differential run's processes: free ports of the loopback, and children killed on drop
//! (shared by the runs against envoyproxy/ratelimit and against Limitador).

use std::net::TcpListener;
use std::process::Child;

use crate::Error;

/// A free port of the loopback (taken and given back; the process binds it next).
pub fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// A child process killed on drop.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
