//! Accepting connections on a port as a server on a network must: at most `max_connections`
//! open at once (the next ones wait in the kernel's backlog), each without Nagle, and closed
//! when it sends nothing within `handshake_timeout`; an accept that fails for want of file
//! descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) backs off, from 10 ms doubling to
//! 1 s, and is logged at most once a minute, so that connections already open keep being
//! served instead of the accept loop spinning. Under load, a connection's writes wait one turn
//! of the runtime to carry the answers finished meanwhile (`Gathering`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

pub use crate::settings::ConnectionLimits;

/// A listener that accepts within `ConnectionLimits`.
pub struct Accepting {
    listener: TcpListener,
    permits: Arc<Semaphore>,
    pub handshake_timeout: Duration,
    /// The port's name, for logs.
    port: &'static str,
    /// When running out of descriptors was last logged.
    starvation_logged: LoggedAt,
}

/// How often running out of descriptors is logged while it lasts.
const STARVATION_LOG_EVERY: Duration = Duration::from_secs(60);

/// When something was last logged, to log it at most once per period.
struct LoggedAt(std::sync::Mutex<Option<std::time::Instant>>);

impl LoggedAt {
    /// Whether it is time to log again (never logged, or `period` ago); notes now if so.
    fn elapsed_or_first(&self, period: Duration) -> bool {
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if last.is_some_and(|at| at.elapsed() < period) {
            return false;
        }
        *last = Some(std::time::Instant::now());
        true
    }
}

impl Accepting {
    pub fn new(listener: TcpListener, limits: ConnectionLimits, port: &'static str) -> Accepting {
        Accepting {
            listener,
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            handshake_timeout: limits.handshake_timeout,
            port,
            starvation_logged: LoggedAt(std::sync::Mutex::new(None)),
        }
    }

    /// The next connection, once one of the port's places is free.
    pub async fn accept(&self) -> (Connection, SocketAddr) {
        let permit = loop {
            // The semaphore is never closed; were it, waiting again is all there is to do.
            if let Ok(permit) = self.permits.clone().acquire_owned().await {
                break permit;
            }
        };
        let mut backoff = Duration::from_millis(10);
        loop {
            match self.listener.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    return (
                        Connection::new(stream, permit, self.handshake_timeout),
                        addr,
                    );
                }
                Err(error) if out_of_resources(&error) => {
                    if self
                        .starvation_logged
                        .elapsed_or_first(STARVATION_LOG_EVERY)
                    {
                        tracing::warn!(
                            port = self.port,
                            %error,
                            "cannot accept connections (out of file descriptors or memory): open connections are still served; retrying with backoff"
                        );
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                // A connection reset before it was accepted, and the like: the next one.
                Err(error) => tracing::debug!(port = self.port, %error, "accept failed"),
            }
        }
    }
}

/// Whether an accept failed for want of descriptors or memory, which only time cures.
fn out_of_resources(error: &io::Error) -> bool {
    // EMFILE 24, ENFILE 23, ENOBUFS 105, ENOMEM 12 (Linux).
    matches!(error.raw_os_error(), Some(24 | 23 | 105 | 12))
}

/// An accepted connection: its place on the port is given back when it closes.
pub struct Connection {
    stream: TcpStream,
    _place: OwnedSemaphorePermit,
    /// Until the first bytes arrive: when the connection is given up.
    handshake: Option<Pin<Box<Sleep>>>,
    /// Whether writes wait to carry more.
    gathering: Gathering,
}

impl Connection {
    fn new(stream: TcpStream, place: OwnedSemaphorePermit, timeout: Duration) -> Connection {
        Connection {
            stream,
            _place: place,
            handshake: Some(Box::pin(tokio::time::sleep(timeout))),
            gathering: Gathering::default(),
        }
    }

    /// The connection taken off the runtime that accepted it, to be served on another
    /// (`Detached::attach`): its socket, its place on the port and its handshake deadline.
    pub fn detach(self) -> io::Result<Detached> {
        Ok(Detached {
            stream: self.stream.into_std()?,
            place: self._place,
            handshake_by: self.handshake.as_ref().map(|sleep| sleep.deadline()),
        })
    }

    /// Puts a write off once, behind the tasks already waiting to run, so that one system
    /// call carries the answers of every call that finishes meanwhile (`Gathering`).
    fn gather_writes(&mut self, cx: &mut Context<'_>, bytes: usize) -> Poll<()> {
        if self.gathering.put_off(bytes) {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(())
    }
}

/// An accepted connection between two runtimes.
pub struct Detached {
    stream: std::net::TcpStream,
    place: OwnedSemaphorePermit,
    handshake_by: Option<tokio::time::Instant>,
}

impl Detached {
    /// The connection again, on the current thread's runtime (whose reactor then tells its
    /// task when the socket is ready).
    pub fn attach(self) -> io::Result<Connection> {
        Ok(Connection {
            stream: TcpStream::from_std(self.stream)?,
            _place: self.place,
            handshake: self
                .handshake_by
                .map(|deadline| Box::pin(tokio::time::sleep_until(deadline))),
            gathering: Gathering::default(),
        })
    }
}

/// When a connection's writes wait a turn.
///
/// An HTTP/2 connection writes whenever its task runs after one of its streams has answered.
/// Under load, with more answers about to finish, that is a `send` for a few answers (for each
/// one, in a build whose runtime keeps tokio's LIFO slot, which runs the task just woken
/// first: `serving_runtime` in `src/main.rs`). Put off by one turn of the runtime, a write
/// carries every answer finished meanwhile. Waiting pays only under load, so it goes on while the writes
/// it puts off grow, and is otherwise tried once every `TRY_EVERY` writes: a connection with
/// one call at a time writes at once.
#[derive(Default)]
struct Gathering {
    /// The bytes of the write put off, while it is.
    waiting: Option<usize>,
    /// Whether the last write put off had grown meanwhile.
    pays: bool,
    /// Writes made at once since waiting was last tried.
    at_once: u8,
}

impl Gathering {
    /// How often waiting is tried while it does not pay.
    const TRY_EVERY: u8 = 8;

    /// Whether a write of `bytes` waits a turn.
    fn put_off(&mut self, bytes: usize) -> bool {
        if let Some(before) = self.waiting.take() {
            self.pays = bytes > before;
            return false;
        }
        if !self.pays {
            self.at_once += 1;
            if self.at_once < Self::TRY_EVERY {
                return false;
            }
        }
        self.at_once = 0;
        self.waiting = Some(bytes);
        true
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        match &read {
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.handshake = None,
            Poll::Pending => {
                if let Some(deadline) = self.handshake.as_mut() {
                    if deadline.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no bytes within the handshake timeout",
                        )));
                    }
                }
            }
            _ => {}
        }
        read
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.gather_writes(cx, buf.len()));
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let bytes = bufs.iter().map(|b| b.len()).sum();
        std::task::ready!(self.gather_writes(cx, bytes));
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// A connection of the gRPC port: plaintext, or TLS once its handshake is done.
pub enum GrpcConnection {
    Plain(Connection),
    Tls(Box<tokio_rustls::server::TlsStream<Connection>>),
}

impl AsyncRead for GrpcConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            GrpcConnection::Plain(c) => Pin::new(c).poll_read(cx, buf),
            GrpcConnection::Tls(c) => Pin::new(c.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for GrpcConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            GrpcConnection::Plain(c) => Pin::new(c).poll_write(cx, buf),
            GrpcConnection::Tls(c) => Pin::new(c.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            GrpcConnection::Plain(c) => Pin::new(c).poll_flush(cx),
            GrpcConnection::Tls(c) => Pin::new(c.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            GrpcConnection::Plain(c) => Pin::new(c).poll_shutdown(cx),
            GrpcConnection::Tls(c) => Pin::new(c.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            GrpcConnection::Plain(c) => Pin::new(c).poll_write_vectored(cx, bufs),
            GrpcConnection::Tls(c) => Pin::new(c.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            GrpcConnection::Plain(c) => c.is_write_vectored(),
            GrpcConnection::Tls(c) => c.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn writes_wait_while_waiting_gathers_more() {
        let mut gathering = Gathering::default();
        // Waiting is tried at the eighth write while it has not paid yet.
        for _ in 1..Gathering::TRY_EVERY {
            assert!(!gathering.put_off(40));
        }
        assert!(gathering.put_off(40));
        // It gathered: the write grew from 40 to 400 bytes meanwhile.
        assert!(!gathering.put_off(400));
        assert!(
            gathering.put_off(40),
            "waiting paid, so the next write waits"
        );
        // It gathered nothing: writes go at once again, but for one in eight.
        assert!(!gathering.put_off(40));
        let waited = (0..2 * Gathering::TRY_EVERY)
            .filter(|_| gathering.put_off(40) && !gathering.put_off(40))
            .count();
        assert_eq!(waited, 2);
    }

    /// A port of one place, its connection accepted, and the peer on the other end.
    async fn one_accepted() -> (Accepting, Connection, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let limits = ConnectionLimits {
            max_connections: 1,
            handshake_timeout: Duration::from_secs(5),
        };
        let accepting = Accepting::new(listener, limits, "test");
        let (connection, _) = accepting.accept().await;
        (accepting, connection, peer)
    }

    #[tokio::test]
    async fn a_connection_detached_is_served_on_another_runtime_and_keeps_its_place() {
        let (accepting, connection, mut peer) = one_accepted().await;
        let detached = connection.detach().unwrap();
        // Another thread's runtime answers on it; the port's one place stays taken meanwhile.
        let served = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let mut connection = detached.attach().unwrap();
                let mut asked = [0u8; 3];
                connection.read_exact(&mut asked).await.unwrap();
                connection.write_all(b"pong").await.unwrap();
                connection.flush().await.unwrap();
                asked
            })
        });
        assert_eq!(accepting.permits.available_permits(), 0);
        peer.write_all(b"hey").await.unwrap();
        let mut answer = [0u8; 4];
        peer.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"pong");
        assert_eq!(&served.join().unwrap(), b"hey");
        // Closed on the other runtime: its place is given back.
        assert_eq!(accepting.permits.available_permits(), 1);
    }

    #[tokio::test]
    async fn a_write_put_off_reaches_the_peer() {
        let (_accepting, mut connection, mut peer) = one_accepted().await;
        // Waiting pays for the first writes (each grows): every one is put off, none is lost.
        connection.gathering.pays = true;
        for round in 0..3u8 {
            connection.write_all(&[round; 10]).await.unwrap();
            connection.flush().await.unwrap();
            let mut got = [0u8; 10];
            peer.read_exact(&mut got).await.unwrap();
            assert_eq!(got, [round; 10]);
        }
    }
}
