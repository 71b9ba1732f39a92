//! Real `redis-server` processes for tests, each on a free port, stopped on drop.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    args: Vec<String>,
    pub dir: tempfile::TempDir,
}

/// A port no one listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl RedisServer {
    /// Starts `redis-server` on a free port with `extra` arguments.
    pub fn start(extra: &[&str]) -> RedisServer {
        RedisServer::start_on(free_port(), extra)
    }

    /// Starts `redis-server` on `port`.
    pub fn start_on(port: u16, extra: &[&str]) -> RedisServer {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--bind",
            "127.0.0.1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut server = RedisServer {
            child: None,
            port,
            args,
            dir,
        };
        server.restart();
        server
    }

    /// (Re)starts the process with the same port and arguments, and waits until it answers.
    pub fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(&self.args)
            .current_dir(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server (is it installed? scripts/test installs it): {e}")
            });
        self.child = Some(child);
        self.wait_until_ready();
    }

    /// Stops the process (SIGKILL: like a crash).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    fn wait_until_ready(&self) {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if cli(self.port, &["PING"]).trim() == "PONG" {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not answer PING", self.port);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `redis-cli -p port args...`.
pub fn cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write file");
    path.display().to_string()
}
