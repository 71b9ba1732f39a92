//! Putting a loaded configuration in force, off the async runtime: the load runs on a thread
//! of its own at a lower priority, the listeners hear of the result there, it is swapped in,
//! and the previous one is dropped there too, once no request holds it. Dropping a tree of
//! 100,000 rules takes tens of milliseconds; done by the last request that held it, or by the
//! reload's task, it would stall a runtime thread and every call queued behind it. At the
//! priority of the threads that answer calls, a compile of 100,000 rules (a second of CPU)
//! took whole time slices from them on a 2-core machine: calls waited 33 ms instead of 8
//! (BENCHMARKS.md, "How does the cost hold as rules, keys, descriptors and clients grow?").

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::{Config, ReloadResult};

/// The nice value of the thread that loads a configuration: its time slices are short and
/// few beside the runtime's while calls are being answered, and it still gets about a tenth
/// of a core when both cores are busy (a compile of 100,000 rules then takes ten seconds).
const LOAD_NICE: i32 = 10;

/// Runs `load` on a thread of its own at `LOAD_NICE` and waits for its result without blocking
/// the runtime. The thread logs where its caller does (a server embedded in another
/// process, a test's, keeps its own log).
pub async fn off_the_runtime<T: Send + 'static>(
    load: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    let (done, result) = tokio::sync::oneshot::channel();
    let log = tracing::dispatcher::get_default(tracing::Dispatch::clone);
    std::thread::Builder::new()
        .name("sluice-config".to_string())
        .spawn(move || {
            let _log = tracing::dispatcher::set_default(&log);
            lower_priority();
            let _ = done.send(load());
        })?;
    result
        .await
        .map_err(|_| std::io::Error::other("the configuration load panicked"))
}

/// Lowers this thread's priority to `LOAD_NICE` (Linux: the nice value is per thread).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    if let Err(error) =
        rustix::process::setpriority_process(Some(rustix::thread::gettid()), LOAD_NICE)
    {
        tracing::debug!(%error, "cannot lower the priority of the config loading thread");
    }
}

/// What hears of every load, refused or put in force.
pub type OnLoad = Arc<dyn Fn(ReloadResult<'_>) + Send + Sync>;

/// How long the previous configuration may stay held by requests before this thread gives up
/// its drop to whoever holds it last (a request in flight holds it for microseconds).
const RELEASE_WAIT: Duration = Duration::from_secs(1);

/// Tells `on_load`, swaps `config` in, and drops the previous one here. Call it off the
/// async runtime (in `off_the_runtime`).
pub fn put_in_force(current: &ArcSwap<Config>, config: Config, on_load: &OnLoad) {
    on_load(Ok(&config));
    let previous = current.swap(Arc::new(config));
    drop_when_unshared(previous);
}

/// Waits (briefly) until nothing else holds `previous`, then drops it on this thread.
fn drop_when_unshared(previous: Arc<Config>) {
    let deadline = Instant::now() + RELEASE_WAIT;
    while Arc::strong_count(&previous) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(previous);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{load_str, LoadOptions};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn config(domain: &str) -> Config {
        let yaml = format!(
            "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"
        );
        load_str("c.yaml", &yaml, LoadOptions::default()).expect("loads")
    }

    #[test]
    fn the_previous_config_is_dropped_here_once_its_last_holder_lets_go() {
        let current = Arc::new(ArcSwap::from_pointee(config("a")));
        let held = current.load_full();
        let heard = Arc::new(AtomicUsize::new(0));
        let counter = heard.clone();
        let on_load: OnLoad = Arc::new(move |result| {
            assert!(result.is_ok());
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let holder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            Arc::strong_count(&held)
        });
        let started = Instant::now();
        put_in_force(&current, config("b"), &on_load);
        // The swap waited for the holder, which still shared the old config.
        assert!(started.elapsed() >= Duration::from_millis(40));
        assert_eq!(holder.join().expect("holder"), 2);
        assert_eq!(heard.load(Ordering::SeqCst), 1);
        assert!(current.load().domain("b").is_some());
    }
}
