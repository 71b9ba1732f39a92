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
    /// For a TLS-only server: the CA file `redis-cli` must trust.
    tls_ca: Option<String>,
}

/// A Redis Cluster of three primaries on free ports, formed and serving every slot.
pub fn start_cluster() -> Vec<RedisServer> {
    start_cluster_of(0, "3000")
}

/// A Redis Cluster of three primaries with `replicas` replicas each, whose nodes count one
/// another failed after `node_timeout_ms`; formed, serving every slot, replicas in sync.
/// The primaries come first.
pub fn start_cluster_of(replicas: usize, node_timeout_ms: &str) -> Vec<RedisServer> {
    let cluster_args = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        node_timeout_ms,
    ];
    let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
        .map(|_| RedisServer::start(&cluster_args))
        .collect();
    let addresses: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let mut create = vec!["--cluster", "create"];
    create.extend(addresses.iter().map(String::as_str));
    let replicas = replicas.to_string();
    create.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
    nodes[0].cli(&create);
    let deadline = Instant::now() + Duration::from_secs(30);
    let in_sync = |n: &RedisServer| {
        let info = n.cli(&["INFO", "replication"]);
        !info.contains("role:slave") || info.contains("master_link_status:up")
    };
    while !nodes
        .iter()
        .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") && in_sync(n))
    {
        assert!(Instant::now() < deadline, "the cluster did not form");
        std::thread::sleep(Duration::from_millis(100));
    }
    nodes
}

/// How many script calls (FCALL, EVALSHA, EVAL) Redis has run.
pub fn script_calls(redis: &RedisServer) -> u64 {
    redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter(|l| {
            ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"]
                .iter()
                .any(|name| l.starts_with(name))
        })
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The flags of a sluice on the Cluster of `nodes`.
pub fn cluster_flags(nodes: &[RedisServer]) -> Vec<String> {
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    ["--store", "redis", "--redis-type", "cluster", "--redis-url"]
        .into_iter()
        .map(str::to_string)
        .chain(std::iter::once(urls.join(",")))
        .collect()
}

/// The flags of a sluice on the single Redis `redis`.
pub fn single_flags(redis: &RedisServer) -> Vec<String> {
    ["--store", "redis", "--redis-url", &redis.url()]
        .map(str::to_string)
        .to_vec()
}

/// The flags of a sluice led by `sentinel` to the primary it names `master`.
pub fn sentinel_flags(sentinel: &RedisServer, master: &str) -> Vec<String> {
    let url = sentinel.url();
    [
        "--store",
        "redis",
        "--redis-type",
        "sentinel",
        "--redis-sentinel-master",
        master,
    ]
    .into_iter()
    .chain(["--redis-url", &url])
    .map(str::to_string)
    .collect()
}

/// A port no one listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl RedisServer {
    /// Starts `redis-server` on a free port with `extra` arguments. A port found free can be
    /// taken before the server binds it (by another test's listener, or, for a Cluster node,
    /// its bus port, the port + 10000): then the server exits, and another port is tried.
    pub fn start(extra: &[&str]) -> RedisServer {
        for _ in 0..4 {
            if let Some(server) = RedisServer::try_start_on(free_port(), extra) {
                return server;
            }
        }
        RedisServer::start_on(free_port(), extra)
    }

    /// Starts `redis-server` on `port`.
    pub fn start_on(port: u16, extra: &[&str]) -> RedisServer {
        let mut server = RedisServer::unstarted_on(port, extra);
        server.restart();
        server
    }

    /// `redis-server` on `port`, when it starts there.
    fn try_start_on(port: u16, extra: &[&str]) -> Option<RedisServer> {
        let mut server = RedisServer::unstarted_on(port, extra);
        server.try_restart().then_some(server)
    }

    /// A server on `port` with `extra` arguments, not started yet.
    fn unstarted_on(port: u16, extra: &[&str]) -> RedisServer {
        let port_text = port.to_string();
        let mut args = vec![
            "--port",
            &port_text,
            "--save",
            "",
            "--appendonly",
            "no",
            "--bind",
            "127.0.0.1",
        ];
        args.extend_from_slice(extra);
        RedisServer {
            child: None,
            port,
            args: args.iter().map(|s| s.to_string()).collect(),
            dir: tempfile::tempdir().expect("temporary directory"),
            tls_ca: None,
        }
    }

    /// Starts a sentinel on a free port, monitoring the primary on `primary_port` as `name`
    /// (counting it down after a minute: no failover within a test).
    pub fn start_sentinel(name: &str, primary_port: u16) -> RedisServer {
        RedisServer::start_sentinel_with(name, primary_port, 60_000)
    }

    /// A sentinel (the only one, so its own quorum) that counts the primary down after
    /// `down_after_ms` and fails over to a replica.
    pub fn start_sentinel_with(name: &str, primary_port: u16, down_after_ms: u64) -> RedisServer {
        let dir = tempfile::tempdir().expect("temporary directory");
        let port = free_port();
        let config = format!(
            "port {port}\nbind 127.0.0.1\nsentinel monitor {name} 127.0.0.1 {primary_port} 1\nsentinel down-after-milliseconds {name} {down_after_ms}\nsentinel failover-timeout {name} 10000\n"
        );
        let path = write(dir.path(), "sentinel.conf", &config);
        RedisServer::spawn(port, &[&path, "--sentinel"], None, dir)
    }

    /// Starts a TLS-only server with a CA and a certificate for 127.0.0.1 made with openssl.
    pub fn start_tls() -> RedisServer {
        let dir = tempfile::tempdir().expect("temporary directory");
        let d = dir.path().display().to_string();
        let run = |command: &str| {
            let status = Command::new("sh")
                .arg("-c")
                .arg(command)
                .current_dir(dir.path())
                .status();
            assert!(
                status.is_ok_and(|s| s.success()),
                "openssl failed: {command}"
            );
        };
        run("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj /CN=sluice-test-ca 2>/dev/null");
        run("openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null");
        write(
            dir.path(),
            "ext.cnf",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
        );
        run("openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 1 -extfile ext.cnf 2>/dev/null");
        let port = free_port();
        let port_text = port.to_string();
        let (cert, key, ca) = (
            format!("{d}/server.crt"),
            format!("{d}/server.key"),
            format!("{d}/ca.crt"),
        );
        let args = [
            "--port",
            "0",
            "--tls-port",
            &port_text,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--bind",
            "127.0.0.1",
        ];
        RedisServer::spawn(port, &args, Some(ca.clone()), dir)
    }

    fn spawn(
        port: u16,
        args: &[&str],
        tls_ca: Option<String>,
        dir: tempfile::TempDir,
    ) -> RedisServer {
        let args = args.iter().map(|s| s.to_string()).collect();
        let mut server = RedisServer {
            child: None,
            port,
            args,
            dir,
            tls_ca,
        };
        server.restart();
        server
    }

    /// A client certificate and key (PEM files) signed by a TLS server's CA, for a server that
    /// checks its clients.
    pub fn client_certificate(&self) -> (String, String) {
        let run = |command: &str| {
            let status = Command::new("sh")
                .arg("-c")
                .arg(command)
                .current_dir(self.dir.path())
                .status();
            assert!(
                status.is_ok_and(|s| s.success()),
                "openssl failed: {command}"
            );
        };
        run("openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=sluice-client 2>/dev/null");
        // A version 3 certificate (extensions make it one): rustls takes no other.
        write(
            self.dir.path(),
            "client.cnf",
            "extendedKeyUsage=clientAuth\n",
        );
        run("openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 1 -extfile client.cnf 2>/dev/null");
        let d = self.dir.path().display();
        (format!("{d}/client.crt"), format!("{d}/client.key"))
    }

    /// The CA file of a TLS server.
    pub fn tls_ca(&self) -> Option<&str> {
        self.tls_ca.as_deref()
    }

    /// (Re)starts the process with the same port and arguments, and waits until it answers.
    pub fn restart(&mut self) {
        if !self.try_restart() {
            panic!("redis-server on port {} did not answer PING", self.port);
        }
    }

    /// (Re)starts the process and waits until it answers; false when it exited or stayed
    /// silent for 10 s.
    fn try_restart(&mut self) -> bool {
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
        self.wait_until_ready()
    }

    /// Stops the process (SIGKILL: like a crash).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) to the process: a stopped Redis keeps its
    /// connections open and answers nothing.
    pub fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("redis-server is running");
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal}");
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        match &self.tls_ca {
            Some(ca) => {
                let mut full = vec!["--tls", "--cacert", ca.as_str()];
                full.extend_from_slice(args);
                cli(self.port, &full)
            }
            None => cli(self.port, args),
        }
    }

    /// Whether the server answers PING within 10 s (false at once when it exited).
    fn wait_until_ready(&mut self) -> bool {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            // An exit first: a PONG could come from whoever holds the port instead.
            let exited = self
                .child
                .as_mut()
                .is_some_and(|child| matches!(child.try_wait(), Ok(Some(_))));
            if exited {
                self.child = None;
                return false;
            }
            if self.cli(&["PING"]).trim() == "PONG" {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
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
