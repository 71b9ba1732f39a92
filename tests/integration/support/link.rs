//! A link between regions, as the tests make one: a TCP proxy on a thread of its own that
//! delays every byte by a fixed time in each direction (a round trip of twice that), and that
//! can be cut (every connection closed, new ones closed as they come) and joined again, or
//! can silence the connections open now (kept open, nothing carried: a peer gone without a
//! word) while new ones are carried; and
//! the global limit the region tests drive, and the window they count in.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// A delaying, cuttable proxy to one upstream address.
pub struct Link {
    pub addr: SocketAddr,
    cut: watch::Sender<bool>,
    /// Raised by each silencing: a connection goes silent when it passes the one it began at.
    silenced: watch::Sender<u64>,
    stopped: Arc<AtomicBool>,
}

impl Link {
    /// A link to `upstream` adding `delay` each way.
    pub fn start(upstream: SocketAddr, delay: Duration) -> Link {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("an address");
        let (cut, cut_seen) = watch::channel(false);
        let (silenced, silenced_seen) = watch::channel(0);
        let stopped = Arc::new(AtomicBool::new(false));
        let stop = stopped.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("a listener");
                while !stop.load(Ordering::Relaxed) {
                    let Ok(Ok((client, _))) =
                        tokio::time::timeout(Duration::from_millis(100), listener.accept()).await
                    else {
                        continue;
                    };
                    if *cut_seen.borrow() {
                        drop(client);
                        continue;
                    }
                    let silent = Silent::from_now(silenced_seen.clone());
                    tokio::spawn(carry(client, upstream, delay, cut_seen.clone(), silent));
                }
            });
        });
        Link {
            addr,
            cut,
            silenced,
            stopped,
        }
    }

    /// The link's address as a Redis URL.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Cuts the link: every connection is closed, and so is every new one.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Silences every connection open now: kept open, nothing more carried either way (a
    /// peer that stopped answering without closing); connections opened later are carried.
    pub fn silence_open_connections(&self) {
        self.silenced.send_modify(|generation| *generation += 1);
    }

    /// Joins the link again.
    pub fn join(&self) {
        self.cut.send_replace(false);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.cut.send_replace(true);
    }
}

/// Carries one connection both ways, each byte `delay` late, until either side closes or the
/// link is cut.
async fn carry(
    client: TcpStream,
    upstream: SocketAddr,
    delay: Duration,
    mut cut: watch::Receiver<bool>,
    silent: Silent,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        _ = delayed(client_read, server_write, delay, silent.clone()) => {}
        _ = delayed(server_read, client_write, delay, silent) => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
}

/// Whether a connection has been silenced since it was opened.
#[derive(Clone)]
struct Silent {
    silenced: watch::Receiver<u64>,
    opened_at: u64,
}

impl Silent {
    fn from_now(silenced: watch::Receiver<u64>) -> Silent {
        let opened_at = *silenced.borrow();
        Silent {
            silenced,
            opened_at,
        }
    }

    fn is_silent(&self) -> bool {
        *self.silenced.borrow() > self.opened_at
    }
}

/// Copies `from` to `to`, each read written `delay` after it was read, in order; once
/// `silent`, what is read is dropped.
async fn delayed(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
    silent: Silent,
) {
    let (sender, mut receiver) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((due, bytes)) = receiver.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) if silent.is_silent() => {}
                Ok(read) => {
                    if sender
                        .send((Instant::now() + delay, buffer[..read].to_vec()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
    };
    tokio::join!(reader, writer);
}

/// The config of one global limit on `tenant` (domain `world`): `limit` a window of `period_s`
/// seconds, held across `regions` in chunks of `chunk`.
pub fn global_config(period_s: u64, limit: usize, chunk: usize, regions: usize) -> String {
    format!(
        "domain: world\ndescriptors:\n  - key: tenant\n    rate_limit:\n      unit: second\n      \
         unit_multiplier: {period_s}\n      requests_per_unit: {limit}\n      \
         global: {{chunk: {chunk}, regions: {regions}}}\n"
    )
}

/// The start, in seconds, of the window of `period` holding now.
pub fn window_start_s(period: Duration) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    now - now % period.as_secs().max(1)
}
