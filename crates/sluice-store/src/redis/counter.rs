//! The plain counter call (`lua/counter.lua`): a request whose every hit is a limit's whole
//! state in one count under a key that names its window, each its descriptor's only limit,
//! decided with a call that reads and charges the counts and replies them, sluice deciding
//! each hit on its count with the core as the memory store does. Most requests are such a
//! request; the general call costs Redis several times as much. A Redis without the function
//! library, a library lost (it is loaded again by the general call that follows), a Redis
//! refusing writes, and a request across a Cluster's slots get the general call instead.

use std::sync::atomic::Ordering;

use redis::Cmd;
use tracing::Instrument;

use super::call::{lost, HitCall};
use super::condition::refuses_writes;
use super::span as spans;
use super::{protocol, store_error, Backend, Connection, RedisStore};
use crate::StoreError;
use sluice_core::algorithm::fixed_window::Window;
use sluice_core::algorithm::State;
use sluice_core::engine::{self, Charging};
use sluice_core::limit::{Decision, Hit};
use smallvec::SmallVec;

impl RedisStore {
    /// Decides `hits`, called as `calls`, with the plain counter call when it can: `None`
    /// when a hit or the backend cannot take it, or the call failed in a way the general call
    /// answers (the library lost, writes refused).
    pub(super) async fn decide_counted(
        &self,
        hits: &[Hit],
        calls: &[HitCall],
        charging: Charging,
        now_us: u64,
    ) -> Option<Result<Vec<Decision>, StoreError>> {
        let backend = self.counter_backend(hits, calls)?;
        // Built before the wait, so that what the call holds while it waits is small.
        let command = {
            let mut windows = smallvec::SmallVec::<[WindowArg; 2]>::new();
            for hit in hits {
                windows.push(if hit.limit.from_first_hit() {
                    WindowArg::FromFirstHit {
                        period_us: hit.limit.period_us(),
                        now_us,
                    }
                } else {
                    WindowArg::Left(hit.limit.window_end_us(now_us)?.saturating_sub(now_us))
                });
            }
            let every = charging == Charging::EveryHit;
            counter_call(self.script.counter_function(), calls, &windows, every)
        };
        let reply = backend
            .send(command)
            .instrument(spans::redis_span("FCALL", calls.len(), "counter"))
            .await;
        let reply = match reply {
            Ok(reply) => reply,
            Err(error) if lost(&error) || refuses_writes(&error) => return None,
            Err(error) => return Some(Err(store_error(error))),
        };
        // The counts, whether they stood, then the start of each window from the first hit.
        let from_first_hit = hits.iter().filter(|hit| hit.limit.from_first_hit()).count();
        if reply.len() != hits.len() + 1 + from_first_hit {
            let what = format!(
                "{} values in a counter's reply for {} hits ({from_first_hit} from the first hit)",
                reply.len(),
                hits.len()
            );
            return Some(Err(protocol(&what)));
        }
        let (counts, rest) = reply.split_at(hits.len());
        let (stood, starts) = (&rest[0], &rest[1..]);
        let count = |index: usize| u64::try_from(counts[index]).unwrap_or(0);
        // Each hit's state: its window's count, and for a window from the first hit its start.
        let mut started = starts.iter().map(|s| u64::try_from(*s).unwrap_or(now_us));
        let starts_us: SmallVec<[Option<u64>; 2]> = hits
            .iter()
            .map(|hit| hit.limit.from_first_hit().then(|| started.next()).flatten())
            .collect();
        let state_of = |index: usize, count: u64| match starts_us[index] {
            Some(start_us) => Some(State::FixedWindow(Window { start_us, count })),
            None => hits[index].limit.window_count(now_us, count),
        };
        let decisions = hits
            .iter()
            .enumerate()
            .map(|(index, hit)| {
                let state = state_of(index, count(index));
                let decision = engine::decide_hit(hit, charging, state.as_ref(), now_us).decision;
                if *stood == 1 || !decision.admitted || hit.cost == 0 {
                    return decision;
                }
                // Vetoed: nothing was charged, so an admitted hit is told what remains on the
                // count its Redis key holds (the first hit's on it), as the general call tells.
                let redis_key = calls.get(index).map(|call| call.key.as_str());
                let first = calls
                    .iter()
                    .position(|other| Some(other.key.as_str()) == redis_key)
                    .unwrap_or(index);
                let state = state_of(first, count(first));
                engine::uncharged(hit, state.as_ref(), now_us)
            })
            .collect();
        Some(Ok(decisions))
    }

    /// The backend that takes the counter call of `hits`: every hit a plain counter, its
    /// descriptor's only limit, all on one backend that took the function library, and on a
    /// Cluster only a call of one hit (one slot).
    fn counter_backend(&self, hits: &[Hit], calls: &[HitCall]) -> Option<&Backend> {
        let first = calls.first()?;
        let backend = &self.backends[first.backend];
        let on_cluster = matches!(backend.connection, Connection::Cluster(_));
        let takes = backend.functions.load(Ordering::Relaxed)
            && !(on_cluster && calls.len() > 1)
            && calls
                .iter()
                .all(|call| call.backend == first.backend && is_plain_counter(call))
            && hits.iter().all(|hit| !hit.joins_previous);
        takes.then_some(backend)
    }
}

/// Whether `call` is a plain counter's: a fixed window without debt (its key names its
/// window, or it starts at the first hit, and sluice's clock is given), with no lease, no
/// modifier's argument (nor so its parts' keys) and no headroom.
fn is_plain_counter(call: &HitCall) -> bool {
    let args = &call.args;
    args.algorithm == "fixed_window"
        && !args.debt
        && args.now_us.is_some()
        && args.lease.is_none()
        && args.headroom == 0
        && args.modifiers.iter().all(Option::is_none)
}

/// What the counter call is told of a hit's window.
enum WindowArg {
    /// The time left to its end: its key lives that long when the call makes it.
    Left(u64),
    /// A window from the first hit: its period, and now (`f<W>@<now>`, in µs).
    FromFirstHit { period_us: u64, now_us: u64 },
}

/// FCALL of the counter `function` for `calls`, each hit's window as `windows` says,
/// charging a hit that does not fit when `every`.
fn counter_call(function: &str, calls: &[HitCall], windows: &[WindowArg], every: bool) -> Cmd {
    let keys_len: usize = calls.iter().map(|call| call.key.len()).sum();
    let mut cmd = Cmd::with_capacity(
        4 + 5 * calls.len(),
        function.len() + keys_len + 48 * calls.len() + 16,
    );
    cmd.arg("FCALL").arg(function).arg(calls.len());
    for call in calls {
        cmd.arg(&call.key);
    }
    cmd.arg(if every { "1" } else { "0" });
    for (call, window) in calls.iter().zip(windows) {
        cmd.arg(call.args.cost).arg(call.args.requests_per_unit);
        match window {
            WindowArg::Left(left_us) => cmd.arg(ttl_ms(*left_us)),
            WindowArg::FromFirstHit { period_us, now_us } => {
                cmd.arg(format!("f{period_us}@{now_us}"))
            }
        };
        cmd.arg(call.args.role.as_str());
    }
    cmd
}

/// `us` microseconds as a key's time to live in milliseconds, as the general call writes it
/// (`ttl_ms` in `lua/common.lua`): rounded up, plus one.
fn ttl_ms(us: u64) -> u64 {
    us.div_ceil(1000) + 1
}
