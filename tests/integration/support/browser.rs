//! A real browser for the tests: headless Chromium (the Debian package `scripts/test` installs
//! when missing), driven over the DevTools protocol on a WebSocket of its own (a few lines
//! here: the handshake, masked text frames out, frames in), so a test opens a page, reads
//! what its script drew, and takes a screenshot.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The browsers looked for on PATH, the first found is used; all but the first need
/// `--headless`.
const BROWSERS: [&str; 4] = [
    "chromium-headless-shell",
    "chromium",
    "chromium-browser",
    "google-chrome",
];

/// A running headless browser and the DevTools connection to it.
pub struct Browser {
    child: Child,
    socket: TcpStream,
    next_id: u64,
    _profile: tempfile::TempDir,
}

/// A page open in the browser (its DevTools session).
pub struct Page {
    session: String,
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

impl Browser {
    /// Starts headless Chromium; panics, naming the package, when none is installed.
    pub fn start() -> Browser {
        let Some(binary) = BROWSERS.iter().find(|name| on_path(name)) else {
            panic!("no headless Chromium on PATH ({BROWSERS:?}): install the Debian package chromium-headless-shell (scripts/test does)");
        };
        let profile = tempfile::tempdir().expect("a profile directory");
        let mut command = Command::new(binary);
        // A group of its own: Debian's launcher is a shell script whose browser is its child,
        // and the whole group is killed on drop (killing the script alone left the browser).
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        if *binary != BROWSERS[0] {
            command.arg("--headless=new");
        }
        command
            .args([
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--hide-scrollbars",
                "--window-size=1280,1000",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("the browser starts");
        let stderr = child.stderr.take().expect("its stderr");
        let mut lines = BufReader::new(stderr).lines();
        let endpoint = loop {
            let line = lines
                .next()
                .expect("the browser says where DevTools listens")
                .expect("a line");
            if let Some(at) = line.find("ws://") {
                break line[at..].trim().to_string();
            }
        };
        // Keep reading its log so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let socket = handshake(&endpoint);
        Browser {
            child,
            socket,
            next_id: 0,
            _profile: profile,
        }
    }

    /// Sends `method` with `params` (to the page's session, when given) and waits for its
    /// result; panics on an error answer.
    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        write_frame(&mut self.socket, message.to_string().as_bytes());
        loop {
            let answer: Value =
                serde_json::from_slice(&read_message(&mut self.socket)).expect("DevTools JSON");
            if answer["id"] == id {
                assert!(answer["error"].is_null(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Opens `url` in a new page.
    pub fn open(&mut self, url: &str) -> Page {
        self.open_in(json!({"url": url}))
    }

    /// Opens `url` in a new page of a context of its own: nothing another page stored (its
    /// credentials included) is known there.
    pub fn open_isolated(&mut self, url: &str) -> Page {
        let context = self.send(None, "Target.createBrowserContext", json!({}));
        self.open_in(json!({"url": url, "browserContextId": context["browserContextId"]}))
    }

    fn open_in(&mut self, target: Value) -> Page {
        let target = self.send(None, "Target.createTarget", target);
        let attached = self.send(
            None,
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        let session = attached["sessionId"]
            .as_str()
            .expect("a session")
            .to_string();
        Page { session }
    }

    /// The value of the JavaScript `expression` in `page`.
    pub fn eval(&mut self, page: &Page, expression: &str) -> Value {
        let result = self.send(
            Some(&page.session),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        result["result"]["value"].clone()
    }

    /// Waits up to `within` for `expression` to be true in `page`; how long it took.
    pub fn wait_for(&mut self, page: &Page, expression: &str, within: Duration) -> Duration {
        let started = Instant::now();
        loop {
            if self.eval(page, expression) == json!(true) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < within,
                "not true within {within:?}: {expression}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of `page` as the browser shows it.
    pub fn screenshot(&mut self, page: &Page) -> Vec<u8> {
        use base64::Engine;
        let shot = self.send(
            Some(&page.session),
            "Page.captureScreenshot",
            json!({"format": "png"}),
        );
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap_or_default())
            .expect("a PNG")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The WebSocket opening handshake with `endpoint` (`ws://host:port/path`).
fn handshake(endpoint: &str) -> TcpStream {
    let rest = endpoint.trim_start_matches("ws://");
    let (host, path) = rest.split_once('/').expect("a path");
    let mut socket = TcpStream::connect(host).expect("DevTools accepts");
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout");
    let request = format!(
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: c2x1aWNlLXRlc3RzLWtleQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).expect("written");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        socket
            .read_exact(&mut byte)
            .expect("the handshake's answer");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    socket
}

/// One masked text frame (a client's frames are masked).
fn write_frame(socket: &mut TcpStream, payload: &[u8]) {
    let mask = [0x5a, 0x13, 0xc7, 0x2e];
    let mut frame = vec![0x81u8];
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n if n < 65_536 => {
            frame.push(0x80 | 126);
            frame.extend((n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend((n as u64).to_be_bytes());
        }
    }
    frame.extend(mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    socket.write_all(&frame).expect("a frame written");
}

/// One whole message (its frames joined), answering the browser's pings.
fn read_message(socket: &mut TcpStream) -> Vec<u8> {
    let mut message = Vec::new();
    loop {
        let mut head = [0u8; 2];
        socket.read_exact(&mut head).expect("a frame");
        let fin = head[0] & 0x80 != 0;
        let opcode = head[0] & 0x0f;
        let length = match head[1] & 0x7f {
            126 => {
                let mut n = [0u8; 2];
                socket.read_exact(&mut n).expect("a length");
                u64::from(u16::from_be_bytes(n))
            }
            127 => {
                let mut n = [0u8; 8];
                socket.read_exact(&mut n).expect("a length");
                u64::from_be_bytes(n)
            }
            n => u64::from(n),
        };
        let mut payload = vec![0u8; usize::try_from(length).expect("a size")];
        socket.read_exact(&mut payload).expect("a payload");
        match opcode {
            // A ping: answered with its payload.
            0x9 => {
                let mut pong = vec![0x8a, 0x80 | payload.len() as u8, 0, 0, 0, 0];
                pong.extend(&payload);
                socket.write_all(&pong).expect("a pong");
            }
            0x8 => panic!("the browser closed the DevTools connection"),
            _ => {
                message.extend(payload);
                if fin {
                    return message;
                }
            }
        }
    }
}
