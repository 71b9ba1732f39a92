//! Rendering `/metrics` off the request path: the text is made on a blocking thread, never on
//! a runtime thread that decisions need, one render at a time, and after a render that took T
//! the next waits until T has passed, so scrapers looping take at most half a core. With the
//! label sets a client can fill (10,000 by default) a render takes about 100 ms. Every scrape
//! gets a text rendered after it arrived.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

/// Renders in turn.
#[derive(Default)]
pub struct Scrapes {
    /// When the next render may start.
    next_start: Mutex<Option<Instant>>,
}

impl Scrapes {
    /// The text `render` makes, run on a blocking thread in its turn.
    pub async fn text(
        &self,
        render: impl FnOnce() -> String + Send + 'static,
    ) -> Result<String, tokio::task::JoinError> {
        let mut next_start = self.next_start.lock().await;
        if let Some(at) = *next_start {
            tokio::time::sleep_until(at.into()).await;
        }
        let started = Instant::now();
        let text = tokio::task::spawn_blocking(render).await?;
        let took = started.elapsed().min(Duration::from_secs(1));
        *next_start = Some(Instant::now() + took);
        Ok(text)
    }
}
