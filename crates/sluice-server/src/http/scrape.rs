//! Rendering `/metrics` off the request path: the text is made on a blocking thread, never on
//! a runtime thread that decisions need, one render at a time, and after a render that took T
//! the next waits until T has passed, so scrapers looping take at most half a core. With the
//! label sets a client can fill (10,000 by default) a render takes about 100 ms. Every scrape
//! gets a text rendered after it arrived; scrapes that waited while one render was made share
//! it, so N scrapers at once wait for at most two renders, not N.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use tokio::sync::Mutex;

/// Renders in turn.
#[derive(Default)]
pub struct Scrapes {
    turn: Mutex<Turn>,
}

/// What the render in turn needs to know of the last one.
#[derive(Default)]
struct Turn {
    /// When the next render may start.
    next_start: Option<Instant>,
    /// The last text, and when its render started.
    last: Option<(Instant, Bytes)>,
}

impl Scrapes {
    /// A text rendered by `render` (on a blocking thread, in its turn) after this call began.
    pub async fn text(
        &self,
        render: impl FnOnce() -> String + Send + 'static,
    ) -> Result<Bytes, tokio::task::JoinError> {
        let arrived = Instant::now();
        let mut turn = self.turn.lock().await;
        if let Some((started, text)) = &turn.last {
            if *started >= arrived {
                return Ok(text.clone());
            }
        }
        if let Some(at) = turn.next_start {
            tokio::time::sleep_until(at.into()).await;
        }
        let started = Instant::now();
        let text = Bytes::from(tokio::task::spawn_blocking(render).await?);
        let took = started.elapsed().min(Duration::from_secs(1));
        turn.next_start = Some(Instant::now() + took);
        turn.last = Some((started, text.clone()));
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn scrapes_waiting_together_share_one_render() {
        let scrapes = Arc::new(Scrapes::default());
        let renders = Arc::new(AtomicUsize::new(0));
        let scrape = |scrapes: Arc<Scrapes>, renders: Arc<AtomicUsize>| async move {
            scrapes
                .text(move || {
                    std::thread::sleep(Duration::from_millis(50));
                    format!("render {}", renders.fetch_add(1, Ordering::SeqCst))
                })
                .await
        };
        let first = tokio::spawn(scrape(scrapes.clone(), renders.clone()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let waiting: Vec<_> = (0..4)
            .map(|_| tokio::spawn(scrape(scrapes.clone(), renders.clone())))
            .collect();
        assert_eq!(first.await.unwrap().unwrap(), "render 0");
        for scrape in waiting {
            // Each arrived during render 0, so none may take it; they share render 1.
            assert_eq!(scrape.await.unwrap().unwrap(), "render 1");
        }
        assert_eq!(renders.load(Ordering::SeqCst), 2);
    }
}
