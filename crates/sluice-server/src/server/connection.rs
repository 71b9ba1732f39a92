//! One gRPC connection, served in one task: hyper's HTTP/2 connection, and each of its calls
//! polled inside that same task rather than spawned as a task of its own (tonic's server
//! spawns each).
//!
//! Why: a call that waits (on Redis, a lease, a hold) is woken by whoever answers it. Spawned,
//! each call is a task the runtime schedules alone: a batch of Redis replies woke one task a
//! call, an idle worker was woken to steal half of them, and each stolen call then freed the
//! memory another core had allocated and wrote into a connection whose task ran on that other
//! core. Here the batch wakes each connection's task once, and a connection's calls stay on
//! the core its connection is on. Measured at 8 connections x 32 calls in flight: system calls
//! a call 0.34 to 0.22 on Redis and 0.19 to 0.13 on memory (BENCHMARKS.md).
//!
//! What it costs: the calls of one connection run on one core at a time (their HTTP/2 framing
//! already did). A client that needs more than a core's worth of calls opens more connections,
//! as Envoy does (one a worker thread).
//!
//! A call that panics ends alone, as a task of its own would. The connection is told to go
//! away at its maximum age (closed at once after the grace), and when the server drains.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, Stream};
use futures_util::task::AtomicWaker;
use hyper::body::{Body, Incoming};
use hyper::server::conn::http2;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

/// How many times in a row one poll goes round again for calls woken meanwhile before it lets
/// the worker run other tasks (sooner when the runtime's budget for the turn runs out).
const ROUNDS_A_POLL: usize = 16;

/// A call of the connection, as hyper hands it over.
type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The executor hyper is given for one connection: the calls it starts are kept for the
/// connection's task to poll. hyper starts them only while that task polls the connection.
#[derive(Clone, Default)]
pub struct CallsHere {
    started: Arc<Mutex<Vec<Call>>>,
}

impl CallsHere {
    fn started(&self) -> MutexGuard<'_, Vec<Call>> {
        self.started.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<F: Future<Output = ()> + Send + 'static> hyper::rt::Executor<F> for CallsHere {
    /// Keeps `call` for the connection's task, so that a call that panics ends alone (its
    /// stream is reset), as a task of its own would, and not with its connection's calls.
    fn execute(&self, call: F) {
        let contained = async move {
            let mut call = std::pin::pin!(call);
            std::future::poll_fn(move |cx| {
                let polled = std::panic::catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx)));
                polled.unwrap_or_else(|_| {
                    tracing::error!("a gRPC call panicked: its stream is reset");
                    Poll::Ready(())
                })
            })
            .await
        };
        self.started().push(Box::pin(contained));
    }
}

/// The waker the connection and its calls are polled with. A wake while the task is being
/// polled only asks that poll to go round again (the runtime would otherwise queue the task
/// behind the others and poll it once more for what this poll is about to do).
#[derive(Default)]
struct Nudge {
    polling: AtomicBool,
    again: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Nudge {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.polling.load(Ordering::SeqCst) {
            self.again.store(true, Ordering::SeqCst);
        } else {
            self.task.wake();
        }
    }
}

/// A connection (`C`, hyper's) and the calls it started; done when the connection is, and
/// its calls too.
pub struct WithCalls<C: Future> {
    connection: Pin<Box<C>>,
    ended: Option<C::Output>,
    executor: CallsHere,
    calls: FuturesUnordered<Call>,
    nudge: Arc<Nudge>,
    waker: Waker,
}

impl<C: Future> WithCalls<C> {
    /// `connection`, whose calls `executor` was given to hyper to start.
    pub fn new(connection: C, executor: CallsHere) -> Self {
        let nudge = Arc::new(Nudge::default());
        WithCalls {
            connection: Box::pin(connection),
            ended: None,
            executor,
            calls: FuturesUnordered::new(),
            waker: Waker::from(nudge.clone()),
            nudge,
        }
    }

    /// The connection, to close it.
    pub fn connection(&mut self) -> Pin<&mut C> {
        self.connection.as_mut()
    }

    /// One round: the connection (which reads calls and writes answers), then the calls it
    /// started and those woken.
    fn round(&mut self) {
        let mut cx = Context::from_waker(&self.waker);
        if self.ended.is_none() {
            if let Poll::Ready(ended) = self.connection.as_mut().poll(&mut cx) {
                self.ended = Some(ended);
            }
        }
        self.calls.extend(self.executor.started().drain(..));
        while let Poll::Ready(Some(())) = Pin::new(&mut self.calls).poll_next(&mut cx) {}
    }
}

impl<C: Future> Future for WithCalls<C>
where
    C::Output: Unpin,
{
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = self.get_mut();
        this.nudge.task.register(cx.waker());
        for _ in 0..ROUNDS_A_POLL {
            this.nudge.polling.store(true, Ordering::SeqCst);
            this.round();
            this.nudge.polling.store(false, Ordering::SeqCst);
            if !this.nudge.again.swap(false, Ordering::SeqCst) {
                if this.calls.is_empty() {
                    if let Some(ended) = this.ended.take() {
                        return Poll::Ready(ended);
                    }
                }
                return Poll::Pending;
            }
            // Out of the runtime's budget for this turn, what was woken would only be told to
            // wait for the next: that turn comes after the other tasks'.
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        // Still busy: other tasks get their turn first.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// What a connection is held to: HTTP/2 keepalive pings, and its age.
#[derive(Debug, Clone, Copy)]
pub struct Lifetime {
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// GOAWAY at this age...
    pub max_age: Duration,
    /// ...and closed this much later, with what is still in flight.
    pub max_age_grace: Duration,
}

/// Serves `service` on `io` until the connection ends: closed by the client, or gone away (at
/// its age, or when `drain` says so or its sender is gone) once its calls are answered, or at
/// most the age's grace after it was told to go away.
pub async fn serve<I, S, B>(io: I, service: S, lifetime: Lifetime, mut drain: watch::Receiver<()>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = B> + Send + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let executor = CallsHere::default();
    let mut builder = http2::Builder::new(executor.clone());
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(lifetime.keepalive_interval)
        .keep_alive_timeout(lifetime.keepalive_timeout)
        // As many calls at once as the client sends, as gRPC servers allow by default.
        .max_concurrent_streams(None);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    let mut served = WithCalls::new(connection, executor);
    let age = tokio::time::sleep(lifetime.max_age);
    let mut age = std::pin::pin!(age);
    // Served until the client closes, or until it is told to go away...
    tokio::select! {
        ended = &mut served => return report_end(ended),
        () = &mut age => {}
        _ = drain.changed() => {}
    }
    served.connection().graceful_shutdown();
    // ...then until its calls are answered, or at most the grace.
    age.as_mut()
        .reset(tokio::time::Instant::now() + lifetime.max_age_grace);
    tokio::select! {
        ended = &mut served => report_end(ended),
        () = &mut age => tracing::debug!("gRPC connection closed at the end of its grace"),
    }
}

/// Logs how a connection ended, when it ended with an error.
fn report_end(ended: Result<(), hyper::Error>) {
    if let Err(error) = ended {
        tracing::debug!(%error, "gRPC connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::AtomicUsize;

    /// A connection that starts `calls` calls (each counting itself done once woken once),
    /// then ends when every call is done.
    struct Starting {
        executor: CallsHere,
        calls: usize,
        done: Arc<AtomicUsize>,
        wakers: Arc<Mutex<Vec<Waker>>>,
    }

    impl Future for Starting {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
            while self.calls > 0 {
                self.calls -= 1;
                let (done, wakers) = (self.done.clone(), self.wakers.clone());
                let mut woken = false;
                self.executor.execute(std::future::poll_fn(move |cx| {
                    if woken {
                        done.fetch_add(1, Ordering::SeqCst);
                        return Poll::Ready(());
                    }
                    woken = true;
                    wakers.lock().expect("wakers").push(cx.waker().clone());
                    Poll::Pending
                }));
            }
            Poll::Ready(())
        }
    }

    #[tokio::test]
    async fn the_connections_calls_run_in_its_task_until_each_is_done() {
        let executor = CallsHere::default();
        let done = Arc::new(AtomicUsize::new(0));
        let wakers = Arc::new(Mutex::new(Vec::new()));
        let connection = Starting {
            executor: executor.clone(),
            calls: 3,
            done: done.clone(),
            wakers: wakers.clone(),
        };
        let served = tokio::spawn(WithCalls::new(connection, executor));
        // The connection has ended, but its calls wait to be woken: the task waits with them.
        while wakers.lock().expect("wakers").len() < 3 {
            tokio::task::yield_now().await;
        }
        assert!(!served.is_finished(), "the task waits for its calls");
        let woken: Vec<Waker> = wakers.lock().expect("wakers").drain(..).collect();
        for waker in woken {
            waker.wake();
        }
        served.await.expect("served");
        assert_eq!(done.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_call_that_panics_ends_alone_and_the_others_go_on() {
        let executor = CallsHere::default();
        let done = Arc::new(AtomicUsize::new(0));
        executor.execute(async { panic!("a call's bug") });
        let counted = done.clone();
        executor.execute(async move {
            tokio::task::yield_now().await;
            counted.fetch_add(1, Ordering::SeqCst);
        });
        let connection = std::future::ready(());
        tokio::spawn(WithCalls::new(connection, executor))
            .await
            .expect("the connection's task ended without a panic");
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }
}
