//! The plain counter call (`lua/counter.lua`): a request of one hit whose limit's whole state
//! is one count in a key that names its window, decided with a call that reads and charges
//! the count and replies it, sluice deciding on the count with the core as the memory store
//! does. Most calls are such a request; the general call costs Redis more than twice as much.
//! A Redis without the function library, a library lost (it is loaded again by the general
//! call that follows) or a Redis refusing writes gets the general call instead.

use std::sync::atomic::Ordering;

use redis::Cmd;
use tracing::Instrument;

use super::call::{lost, HitCall};
use super::condition::refuses_writes;
use super::span as spans;
use super::{protocol, store_error, Backend, RedisStore};
use crate::StoreError;
use sluice_core::engine::{self, Charging};
use sluice_core::limit::{Decision, Hit};

impl RedisStore {
    /// Decides `hit`, alone in its request and called as `call`, with the plain counter call
    /// when it can: `None` when the hit or the backend cannot take it, or the call failed in
    /// a way the general call answers (the library lost, writes refused).
    pub(super) async fn decide_counted(
        &self,
        backend: &Backend,
        hit: &Hit,
        call: &HitCall,
        charging: Charging,
        now_us: u64,
    ) -> Option<Result<Decision, StoreError>> {
        if !backend.functions.load(Ordering::Relaxed) || !is_plain_counter(call) {
            return None;
        }
        let window_end_us = hit.limit.window_end_us(now_us)?;
        let every = charging == Charging::EveryHit;
        let command = counter_call(
            self.script.counter_function(),
            call,
            window_end_us.saturating_sub(now_us),
            every,
        );
        let reply = backend
            .send(command)
            .instrument(spans::redis_span("FCALL", 1, "counter"))
            .await;
        let count = match reply {
            Ok(reply) => match reply.as_slice() {
                [count] => u64::try_from(*count).unwrap_or(0),
                _ => {
                    let what = format!("{} numbers in a counter's reply", reply.len());
                    return Some(Err(protocol(&what)));
                }
            },
            Err(error) if lost(&error) || refuses_writes(&error) => return None,
            Err(error) => return Some(Err(store_error(error))),
        };
        let state = hit.limit.window_count(now_us, count);
        Some(Ok(engine::decide_hit(
            hit,
            charging,
            state.as_ref(),
            now_us,
        )
        .decision))
    }
}

/// Whether `call` is a plain counter's: a fixed window without debt (its key names its
/// window, and sluice's clock is given), with no lease, no modifier's part and no headroom.
fn is_plain_counter(call: &HitCall) -> bool {
    let args = &call.args;
    args.algorithm == "fixed_window"
        && !args.debt
        && args.now_us.is_some()
        && args.lease.is_none()
        && args.headroom == 0
        && args.modifiers.iter().all(Option::is_none)
        && call.modifier_keys.is_empty()
}

/// FCALL of the counter `function` for `call`'s hit, its key made to live `window_left_us`
/// (to its window's end), charging a hit that does not fit when `every`.
fn counter_call(function: &str, call: &HitCall, window_left_us: u64, every: bool) -> Cmd {
    let mut cmd = Cmd::with_capacity(8, function.len() + call.key.len() + 48);
    cmd.arg("FCALL")
        .arg(function)
        .arg(1)
        .arg(&call.key)
        .arg(call.args.cost)
        .arg(call.args.requests_per_unit)
        .arg(ttl_ms(window_left_us))
        .arg(if every { "1" } else { "0" });
    cmd
}

/// `us` microseconds as a key's time to live in milliseconds, as the general call writes it
/// (`ttl_ms` in `lua/common.lua`): rounded up, plus one.
fn ttl_ms(us: u64) -> u64 {
    us.div_ceil(1000) + 1
}
