//! The threads that serve the gRPC port's connections: a runtime of one thread each
//! (`SLUICE_GRPC_THREADS`; by default one a CPU when the store keeps a call on its thread), as
//! Envoy's own workers are. The accept loop hands each connection to the thread with the
//! fewest open; that thread does its TLS handshake and serves it (`connection`) until it
//! ends, and runs the tasks its calls start: the Redis store's connection for that thread's
//! lane (`sluice_store::lane`) among them. With no threads, each connection is served in a
//! task of the runtime the accept loop runs on, with the rest of the server.
//!
//! Why: on one runtime of several workers, a batch of Redis replies woke the connections' tasks
//! on one core and an idle worker on the other was woken to steal half of them; the calls then
//! ran on a core other than the one that held their state. Here a call, its Redis bytes, its
//! reply and the task the reply wakes stay on one core, and an idle thread is woken only by
//! its own sockets. Measured at 8 connections x 32 calls in flight on 2 cores: BENCHMARKS.md.
//!
//! What it costs: a connection stays on the thread it was given. Connections are spread by how
//! many each thread has open, not by how busy they are; a client that sends most of its calls
//! on one of several connections loads one core (Envoy spreads its calls over one connection
//! per worker). And a store whose connection's task runs on the shared runtime (redis-rs's:
//! a Cluster, Sentinel, TLS, explicit pipelining) would wake every call across runtimes, each
//! wake a system call: 12.8 against 18.3 µs a call with `REDIS_PIPELINE_WINDOW=0`, which is
//! why such a store gets no threads unless asked.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tonic::body::Body;
use tonic::codegen::http::{Request, Response};

use super::accept::{Connection, Detached, GrpcConnection};
use super::connection::{self, Lifetime};
use super::TlsConfig;

/// What the threads serve each connection's calls with: the port's routes behind its layers.
pub trait GrpcService:
    tower::Service<
        Request<Incoming>,
        Response = Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S> GrpcService for S where
    S: tower::Service<
            Request<Incoming>,
            Response = Response<Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// How each thread serves the connections it is given.
#[derive(Clone)]
pub struct Serving<S> {
    pub service: S,
    pub lifetime: Lifetime,
    /// TLS on the port: each connection's handshake, within `handshake_timeout`.
    pub tls: Option<Arc<TlsConfig>>,
    pub handshake_timeout: Duration,
    /// Says when the connections are to go away.
    pub draining: watch::Receiver<()>,
}

/// A connection handed to a thread.
struct Handed {
    connection: Detached,
    peer: SocketAddr,
    /// Counts it among its thread's open connections until it is dropped.
    _open: Open,
}

/// One connection counted open on its thread, from when it is handed over until it ends, or
/// its task does in any way.
struct Open(Arc<AtomicUsize>);

impl Open {
    fn count(on: &Arc<AtomicUsize>) -> Open {
        on.fetch_add(1, Ordering::Relaxed);
        Open(on.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where the accept loop hands its connections.
pub enum ServingThreads<S> {
    /// Threads of their own (at least one).
    Own {
        threads: Vec<Thread>,
        /// Where the search for the least busy thread starts: the next after the last
        /// chosen, so that ties go round.
        next: usize,
        /// Dropped with the accept loop: if that is before the threads stopped (the server
        /// given up on at the end of its grace), each thread then drops its runtime, and the
        /// connections on it, at once.
        _abandoned_when_dropped: watch::Sender<()>,
    },
    /// None: each connection is served in a task of the current runtime.
    Shared(Serving<S>),
}

/// One serving thread.
pub struct Thread {
    hand: mpsc::UnboundedSender<Handed>,
    /// Its connections open, handed and not yet ended.
    open: Arc<AtomicUsize>,
    /// Told when the thread's runtime is gone (its tasks with it).
    stopped: oneshot::Receiver<()>,
}

impl<S: GrpcService> ServingThreads<S> {
    /// Starts `count` threads, each serving as `serving` says (none: connections are served
    /// on the current runtime). Fails when a thread or its runtime cannot be made.
    pub fn start(count: usize, serving: Serving<S>) -> io::Result<ServingThreads<S>> {
        if count == 0 {
            return Ok(ServingThreads::Shared(serving));
        }
        let (abandoned, on_abandon) = watch::channel(());
        let threads = (1..=count)
            .map(|lane| start_thread(lane, &serving, on_abandon.clone()))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(ServingThreads::Own {
            threads,
            next: 0,
            _abandoned_when_dropped: abandoned,
        })
    }

    /// Hands `connection` to the thread with the fewest connections open.
    /// (With no threads, serves it in a task of the current runtime.)
    pub fn hand_over(&mut self, connection: Connection, peer: SocketAddr) {
        let (threads, next) = match self {
            ServingThreads::Shared(serving) => {
                tokio::spawn(serve_one(connection, peer, serving.clone()));
                return;
            }
            ServingThreads::Own { threads, next, .. } => (threads, next),
        };
        let connection = match connection.detach() {
            Ok(connection) => connection,
            Err(error) => {
                tracing::debug!(%peer, %error, "a gRPC connection could not be handed over");
                return;
            }
        };
        let count = threads.len();
        let chosen = (0..count)
            .map(|offset| (*next + offset) % count)
            .min_by_key(|index| threads[*index].open.load(Ordering::Relaxed))
            .unwrap_or(0);
        *next = (chosen + 1) % count;
        let thread = &threads[chosen];
        let handed = Handed {
            connection,
            peer,
            _open: Open::count(&thread.open),
        };
        if thread.hand.send(handed).is_err() {
            // The thread is gone (a bug stopped it): the connection closes with the value.
            tracing::error!(peer = %peer, "a gRPC serving thread has stopped: connection closed");
        }
    }

    /// Takes no more connections, and waits until each thread has served its last and
    /// stopped.
    pub async fn stop(self) {
        // Held until the threads have stopped: dropped sooner, it would abandon them.
        let ServingThreads::Own {
            threads,
            _abandoned_when_dropped: _held,
            ..
        } = self
        else {
            return;
        };
        let mut stopping = Vec::with_capacity(threads.len());
        for thread in threads {
            drop(thread.hand);
            stopping.push(thread.stopped);
        }
        for stopped in stopping {
            // An error is a thread that ended without saying so: stopped all the same.
            let _ = stopped.await;
        }
    }
}

/// Starts lane `lane`'s thread: its runtime serves what it is handed until the accept loop
/// lets go and its last connection has ended.
fn start_thread<S: GrpcService>(
    lane: usize,
    serving: &Serving<S>,
    mut abandoned: watch::Receiver<()>,
) -> io::Result<Thread> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (hand, mut handed) = mpsc::unbounded_channel::<Handed>();
    let (say_stopped, stopped) = oneshot::channel();
    let open = Arc::new(AtomicUsize::new(0));
    let serving = serving.clone();
    // The thread logs (and traces) where the thread that started it does.
    let logging = tracing::dispatcher::get_default(Clone::clone);
    std::thread::Builder::new()
        .name(format!("sluice-grpc-{lane}"))
        .spawn(move || {
            let _logging = tracing::dispatcher::set_default(&logging);
            sluice_store::lane::enter(lane);
            runtime.block_on(async move {
                let mut connections = JoinSet::new();
                let served = async {
                    loop {
                        tokio::select! {
                            next = handed.recv() => match next {
                                Some(handed) => {
                                    connections.spawn(serve_handed(handed, serving.clone()));
                                }
                                None => break,
                            },
                            Some(_) = connections.join_next(), if !connections.is_empty() => {}
                        }
                    }
                    drop(serving);
                    while connections.join_next().await.is_some() {}
                };
                tokio::select! {
                    () = served => {}
                    // Nothing is ever sent: its sender gone is the accept loop gone.
                    _ = abandoned.changed() => {}
                }
            });
            // The runtime, and every task its calls started (the lane's Redis connection), is
            // gone before the accept loop is told.
            drop(runtime);
            let _ = say_stopped.send(());
        })?;
    Ok(Thread {
        hand,
        open,
        stopped,
    })
}

/// Serves a connection handed to the current thread, counted open on it until it ends.
async fn serve_handed<S: GrpcService>(handed: Handed, serving: Serving<S>) {
    let Handed {
        connection,
        peer,
        _open: _counted,
    } = handed;
    match connection.attach() {
        Ok(connection) => serve_one(connection, peer, serving).await,
        Err(error) => tracing::debug!(%peer, %error, "a gRPC connection could not be served"),
    }
}

/// Serves one connection on the current runtime: its TLS handshake first when the port has
/// TLS (a failed or slow one closes it), then its calls until it ends.
async fn serve_one<S: GrpcService>(connection: Connection, peer: SocketAddr, serving: Serving<S>) {
    let connection = match &serving.tls {
        None => GrpcConnection::Plain(connection),
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
            match tokio::time::timeout(serving.handshake_timeout, acceptor.accept(connection)).await
            {
                Ok(Ok(stream)) => GrpcConnection::Tls(Box::new(stream)),
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake refused");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            }
        }
    };
    let service = TowerToHyperService::new(serving.service);
    connection::serve(connection, service, serving.lifetime, serving.draining).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::accept::{Accepting, ConnectionLimits};
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    /// Threads serving a service that answers every call empty; the sender that drains them.
    fn threads(count: usize) -> (ServingThreads<impl GrpcService>, watch::Sender<()>) {
        let service = tower::service_fn(|_: Request<Incoming>| async {
            Ok::<_, Infallible>(Response::new(Body::empty()))
        });
        let (drain, draining) = watch::channel(());
        let lifetime = Lifetime {
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            max_age: Duration::from_secs(3600),
            max_age_grace: Duration::from_secs(3600),
        };
        let serving = Serving {
            service,
            lifetime,
            tls: None,
            handshake_timeout: Duration::from_secs(30),
            draining,
        };
        (
            ServingThreads::start(count, serving).expect("threads"),
            drain,
        )
    }

    /// A client connected to `threads` through a port of its own, handed over.
    async fn connected(threads: &mut ServingThreads<impl GrpcService>) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let client = TcpStream::connect(listener.local_addr().expect("its address"))
            .await
            .expect("connected");
        let limits = ConnectionLimits {
            max_connections: 8,
            handshake_timeout: Duration::from_secs(30),
        };
        let (connection, peer) = Accepting::new(listener, limits, "test").accept().await;
        threads.hand_over(connection, peer);
        client
    }

    /// Whether `client`'s connection is closed by the server within `limit`.
    async fn closed_within(client: &mut TcpStream, limit: Duration) -> bool {
        let mut buffer = [0u8; 64];
        let read_to_end =
            async { while client.read(&mut buffer).await.is_ok_and(|read| read > 0) {} };
        tokio::time::timeout(limit, read_to_end).await.is_ok()
    }

    #[tokio::test]
    async fn connections_go_to_the_thread_with_fewest_open() {
        let (mut threads, _drain) = threads(2);
        let _first = connected(&mut threads).await;
        let second = connected(&mut threads).await;
        let open = |threads: &ServingThreads<_>| -> Vec<usize> {
            match threads {
                ServingThreads::Own { threads, .. } => threads
                    .iter()
                    .map(|t| t.open.load(Ordering::Relaxed))
                    .collect(),
                ServingThreads::Shared(_) => Vec::new(),
            }
        };
        assert_eq!(open(&threads), [1, 1]);
        // The second closes: its thread has fewest, and takes the next.
        drop(second);
        let started = std::time::Instant::now();
        while open(&threads) != [1, 0] && started.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(open(&threads), [1, 0]);
        let _third = connected(&mut threads).await;
        assert_eq!(open(&threads), [1, 1]);
    }

    #[tokio::test]
    async fn threads_dropped_before_they_stopped_close_their_connections_at_once() {
        let (mut threads, _drain) = threads(2);
        let mut client = connected(&mut threads).await;
        assert!(!closed_within(&mut client, Duration::from_millis(200)).await);
        // The accept loop given up on (its server's grace ran out): no drain, no handshake
        // timeout (30 s) waited for.
        drop(threads);
        assert!(closed_within(&mut client, Duration::from_secs(5)).await);
    }
}
