//! Hot reload: watches the config paths (inotify; a Kubernetes ConfigMap update, a symlink
//! swap of `..data`, is seen as a change in the mounted directory) and reloads on change or on
//! request (SIGHUP). A refused load keeps the previous config serving; a good one is swapped in
//! atomically, so a request always sees one whole config.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, Notify};

use crate::in_force::{off_the_runtime, put_in_force, OnLoad};
use crate::{load, Config, ConfigErrors, LoadOptions};

/// How long to wait for a burst of file events to settle before reloading.
const SETTLE: Duration = Duration::from_millis(200);

/// What happened to one reload attempt.
pub type ReloadResult<'a> = Result<&'a Config, &'a ConfigErrors>;

/// Reloads the config into `current`.
pub struct Reloader {
    paths: Vec<PathBuf>,
    options: LoadOptions,
    current: Arc<ArcSwap<Config>>,
    on_reload: OnLoad,
}

impl Reloader {
    /// A reloader of `paths` into `current`; `on_reload` hears of every attempt.
    pub fn new(
        paths: Vec<PathBuf>,
        options: LoadOptions,
        current: Arc<ArcSwap<Config>>,
        on_reload: impl Fn(ReloadResult<'_>) + Send + Sync + 'static,
    ) -> Reloader {
        Reloader {
            paths,
            options,
            current,
            on_reload: Arc::new(on_reload),
        }
    }

    /// Loads the paths again and puts a valid result in force, all off the async runtime
    /// (reading, parsing, compiling, the listeners and dropping the previous config block).
    /// Returns whether it was valid.
    pub async fn reload(&self) -> bool {
        let (paths, options) = (self.paths.clone(), self.options);
        let (current, on_reload) = (self.current.clone(), self.on_reload.clone());
        let reloaded = off_the_runtime(move || match load(&paths, options) {
            Ok(config) => {
                put_in_force(&current, config, &on_reload);
                true
            }
            Err(errors) => {
                on_reload(Err(&errors));
                false
            }
        });
        match reloaded.await {
            Ok(reloaded) => reloaded,
            Err(error) => {
                tracing::error!(%error, "the config load did not finish; the previous one keeps serving");
                false
            }
        }
    }

    /// Starts watching now (with `watch_files`), so that no change made after this returns
    /// is missed; the future reloads whenever `requested` is notified and whenever a watched
    /// file changes, until dropped.
    pub fn start(
        self,
        requested: Arc<Notify>,
        watch_files: bool,
    ) -> impl std::future::Future<Output = ()> + Send {
        let (changed_tx, mut changed) = mpsc::unbounded_channel();
        let watcher = watch_files.then(|| self.watcher(changed_tx)).flatten();
        async move {
            // Held for as long as the reloads run; without one, reloads come from SIGHUP.
            let mut watching = watcher.is_some();
            let _watcher = watcher;
            loop {
                tokio::select! {
                    event = changed.recv(), if watching => {
                        if event.is_none() {
                            watching = false;
                            continue;
                        }
                        // Let a burst of events (an editor's save, a ConfigMap swap) settle.
                        tokio::time::sleep(SETTLE).await;
                        while changed.try_recv().is_ok() {}
                        tracing::info!("config files changed: reloading");
                    }
                    () = requested.notified() => tracing::info!("reload requested (SIGHUP)"),
                }
                self.reload().await;
            }
        }
    }

    /// A watcher of the config paths that tells `changed` of every change.
    fn watcher(&self, changed: mpsc::UnboundedSender<()>) -> Option<notify::RecommendedWatcher> {
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| !e.kind.is_access()) {
                let _ = changed.send(());
            }
        });
        match watcher {
            Ok(mut watcher) => {
                for path in &self.paths {
                    watch(&mut watcher, path);
                }
                Some(watcher)
            }
            Err(error) => {
                tracing::warn!(%error, "cannot watch the config files; reload with SIGHUP");
                None
            }
        }
    }
}

/// Watches a directory recursively, or a file's directory (editors and Kubernetes replace
/// files by renaming, which a watch on the file itself would lose).
fn watch(watcher: &mut impl Watcher, path: &Path) {
    let (target, mode) = if path.is_dir() {
        (path.to_path_buf(), RecursiveMode::Recursive)
    } else {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        (
            parent.unwrap_or(Path::new(".")).to_path_buf(),
            RecursiveMode::NonRecursive,
        )
    };
    if let Err(error) = watcher.watch(&target, mode) {
        tracing::warn!(path = %target.display(), %error, "cannot watch; reload with SIGHUP");
    }
}
