//! The async runtime's own series: the tasks alive now (`sluice_runtime_tasks`), where a leak
//! of tasks (a stream, a timer, a connection never ended) shows first.

use sluice_store::series::{Reporting, Series};

/// Reports the tasks alive on the runtime of `0`.
pub struct RuntimeTasks(pub tokio::runtime::Handle);

impl Reporting for RuntimeTasks {
    fn report(&self, series: &Series) {
        let alive = self.0.metrics().num_alive_tasks();
        series.level("sluice_runtime_tasks", alive as u64);
    }
}
