//! A differential run's processes: free ports of the loopback, children killed on drop, and
//! a `redis-server` for each server (shared by the runs against envoyproxy/ratelimit and
//! against Limitador).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A `redis-server` without persistence on a free port.
pub struct Redis {
    _process: Process,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Result<Redis, Error> {
        let port = free_port()?;
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error(format!("cannot start redis-server: {e}")))?;
        let redis = Redis {
            _process: Process(child),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis.connection().is_err() {
            if Instant::now() > deadline {
                return Err(Error("redis-server did not answer".into()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(redis)
    }

    pub fn connection(&self) -> Result<redis::Connection, Error> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port))?;
        Ok(client.get_connection()?)
    }

    /// Every key and its value, in one `KEYS` and one `MGET` (the runs write strings only).
    pub fn dump(&self) -> Result<Vec<(String, String)>, Error> {
        let mut conn = self.connection()?;
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn)?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        keys.sort();
        let values: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(&mut conn)?;
        // A key that expired between the two reads is gone.
        Ok(keys
            .into_iter()
            .zip(values)
            .filter_map(|(key, value)| Some((key, value?)))
            .collect())
    }

    pub fn flush(&self) -> Result<(), Error> {
        let mut conn = self.connection()?;
        redis::cmd("FLUSHALL").query::<()>(&mut conn)?;
        Ok(())
    }
}
