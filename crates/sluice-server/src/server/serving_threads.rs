//! The threads that serve the gRPC port's connections: a runtime of one thread each
//! (`SLUICE_GRPC_THREADS`, one a CPU by default), as Envoy's own workers are. The accept loop
//! hands each connection to the thread with the fewest open; that thread does its TLS
//! handshake and serves it (`connection`) until it ends, and runs the tasks its calls start:
//! the Redis store's connection for that thread's lane (`sluice_store::lane`) among them.
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
//! per worker).

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

use super::accept::{Detached, GrpcConnection};
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
}

/// The serving threads, as the accept loop sees them.
pub struct ServingThreads {
    threads: Vec<Thread>,
    /// Where the search for the least busy thread starts: the next after the last chosen, so
    /// that ties go round.
    next: usize,
}

/// One serving thread.
struct Thread {
    hand: mpsc::UnboundedSender<Handed>,
    /// Its connections open, handed and not yet ended.
    open: Arc<AtomicUsize>,
    /// Told when the thread's runtime is gone (its tasks with it).
    stopped: oneshot::Receiver<()>,
}

impl ServingThreads {
    /// Starts `count` threads (at least one), each serving as `serving` says. Fails when a
    /// thread or its runtime cannot be made.
    pub fn start<S: GrpcService>(count: usize, serving: Serving<S>) -> io::Result<ServingThreads> {
        let threads = (1..=count.max(1))
            .map(|lane| start_thread(lane, &serving))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(ServingThreads { threads, next: 0 })
    }

    /// Hands `connection` to the thread with the fewest connections open.
    pub fn hand_over(&mut self, connection: Detached, peer: SocketAddr) {
        let count = self.threads.len();
        let chosen = (0..count)
            .map(|offset| (self.next + offset) % count)
            .min_by_key(|index| self.threads[*index].open.load(Ordering::Relaxed))
            .unwrap_or(0);
        self.next = (chosen + 1) % count;
        let thread = &self.threads[chosen];
        thread.open.fetch_add(1, Ordering::Relaxed);
        if thread.hand.send(Handed { connection, peer }).is_err() {
            // The thread is gone (a bug stopped it): the connection closes with the value.
            thread.open.fetch_sub(1, Ordering::Relaxed);
            tracing::error!(peer = %peer, "a gRPC serving thread has stopped: connection closed");
        }
    }

    /// Takes no more connections, and waits until each thread has served its last and
    /// stopped.
    pub async fn stop(self) {
        let mut stopping = Vec::with_capacity(self.threads.len());
        for thread in self.threads {
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
fn start_thread<S: GrpcService>(lane: usize, serving: &Serving<S>) -> io::Result<Thread> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (hand, mut handed) = mpsc::unbounded_channel::<Handed>();
    let (say_stopped, stopped) = oneshot::channel();
    let open = Arc::new(AtomicUsize::new(0));
    let serving = serving.clone();
    let counted = open.clone();
    // The thread logs (and traces) where the thread that started it does.
    let logging = tracing::dispatcher::get_default(Clone::clone);
    std::thread::Builder::new()
        .name(format!("sluice-grpc-{lane}"))
        .spawn(move || {
            let _logging = tracing::dispatcher::set_default(&logging);
            sluice_store::lane::enter(lane);
            runtime.block_on(async move {
                let mut connections = JoinSet::new();
                loop {
                    tokio::select! {
                        next = handed.recv() => match next {
                            Some(Handed { connection, peer }) => {
                                let (serving, counted) = (serving.clone(), counted.clone());
                                connections.spawn(async move {
                                    serve_one(connection, peer, serving).await;
                                    counted.fetch_sub(1, Ordering::Relaxed);
                                });
                            }
                            None => break,
                        },
                        Some(_) = connections.join_next(), if !connections.is_empty() => {}
                    }
                }
                drop(serving);
                while connections.join_next().await.is_some() {}
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

/// Serves one connection on the current thread: its TLS handshake first when the port has
/// TLS (a failed or slow one closes it), then its calls until it ends.
async fn serve_one<S: GrpcService>(connection: Detached, peer: SocketAddr, serving: Serving<S>) {
    let connection = match connection.attach() {
        Ok(connection) => connection,
        Err(error) => {
            tracing::debug!(%peer, %error, "a gRPC connection could not be served");
            return;
        }
    };
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
