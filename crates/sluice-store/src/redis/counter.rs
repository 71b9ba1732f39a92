//! The plain counter call (`lua/counter.lua`): a request whose every hit is a limit's whole
//! state in one count under a key that names its window, each its descriptor's only limit,
//! decided with a call that reads and charges the counts and replies them, sluice deciding
//! each hit on its count with the core as the memory store does. Most requests are such a
//! request; the general call costs Redis several times as much. A Redis without the function
//! library, a library lost (it is loaded again by the general call that follows), a Redis
//! refusing writes, and a request across a Cluster's slots get the general call instead.
//! The call is built from the hits alone: the general call's arguments are built only when
//! the counter call cannot take the request.

use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::Cmd;
use tracing::Instrument;

use super::call::lost;
use super::command::{Args, Command, Encoded, Resp};
use super::condition::refuses_writes;
use super::span as spans;
use super::{protocol, store_error, Backend, Connection, RedisStore};
use crate::{key, StoreError};
use sluice_core::algorithm::fixed_window::Window;
use sluice_core::algorithm::{Algorithm, State};
use sluice_core::engine::{self, Charging};
use sluice_core::limit::{Decision, Hit, Role};
use smallvec::SmallVec;

impl RedisStore {
    /// Decides `hits` with the plain counter call when it can: `None` when a hit or the
    /// backend cannot take it, or the call failed in a way the general call answers (the
    /// library lost, writes refused).
    pub(super) async fn decide_counted(
        &self,
        hits: &[Hit],
        charging: Charging,
        now_us: u64,
        deadline: Instant,
    ) -> Option<Result<Vec<Decision>, StoreError>> {
        let backend = self.counter_backend(hits)?;
        // Written before the wait, so that what the call holds while it waits is small: of
        // the keys, only which hit is the first on each.
        let (sent, first_on_key) = {
            let mut counted = SmallVec::<[CountedHit; 2]>::new();
            for hit in hits {
                let window = if hit.limit.from_first_hit() {
                    WindowArg::FromFirstHit {
                        period_us: hit.limit.period_us(),
                        now_us,
                    }
                } else {
                    WindowArg::Left(hit.limit.window_end_us(now_us)?.saturating_sub(now_us))
                };
                counted.push(CountedHit {
                    key: key::redis_key(&self.key_prefix, hit, now_us),
                    cost: hit.cost,
                    requests_per_unit: hit.limit.requests_per_unit,
                    role: hit.role,
                    window,
                });
            }
            let first_on_key: SmallVec<[usize; 2]> = (0..counted.len())
                .map(|index| {
                    let key = &counted[index].key;
                    counted
                        .iter()
                        .position(|other| other.key == *key)
                        .unwrap_or(index)
                })
                .collect();
            let call = CounterCall {
                head: self.script.counter_call(),
                hits: &counted,
                every: charging == Charging::EveryHit,
            };
            (backend.send(call, deadline), first_on_key)
        };
        let reply = sent
            .instrument(spans::redis_span("FCALL", hits.len(), "counter"))
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
                let first = first_on_key.get(index).copied().unwrap_or(index);
                let state = state_of(first, count(first));
                engine::uncharged(hit, state.as_ref(), now_us)
            })
            .collect();
        Some(Ok(decisions))
    }

    /// The backend that takes the counter call of `hits`: every hit a plain counter, its
    /// descriptor's only limit, all on one backend that took the function library, and on a
    /// Cluster only a call of one hit (one slot).
    fn counter_backend(&self, hits: &[Hit]) -> Option<&Backend> {
        let index = self.backend_of(hits.first()?);
        let backend = &self.backends[index];
        let on_cluster = matches!(backend.connection, Connection::Cluster(_));
        let takes = backend.functions.load(Ordering::Relaxed)
            && !(on_cluster && hits.len() > 1)
            && hits.iter().all(|hit| {
                self.backend_of(hit) == index && self.is_plain_counter(hit) && !hit.joins_previous
            });
        takes.then_some(backend)
    }

    /// Whether `hit` is a plain counter's, as its script arguments would say: a fixed window
    /// without debt (its key names its window, or it starts at the first hit, and sluice's
    /// clock is given), with no lease, no modifier with a script (nor so its parts' keys)
    /// and no headroom.
    fn is_plain_counter(&self, hit: &Hit) -> bool {
        let limit = &hit.limit;
        let modifiers = &limit.modifiers;
        limit.algorithm() == Algorithm::FixedWindow
            && !limit.debt
            && self.gives_its_clock(hit)
            && hit.lease.is_none()
            && modifiers.headroom(limit.capacity()) == 0
            && (modifiers.is_empty() || modifiers.script_args(None, 0).iter().all(Option::is_none))
    }
}

/// A hit as the counter call sends it.
struct CountedHit {
    key: String,
    cost: u64,
    requests_per_unit: u32,
    role: Role,
    window: WindowArg,
}

/// What the counter call is told of a hit's window.
enum WindowArg {
    /// The time left to its end: its key lives that long when the call makes it.
    Left(u64),
    /// A window from the first hit: its period, and now (`f<W>@<now>`, in µs).
    FromFirstHit { period_us: u64, now_us: u64 },
}

/// FCALL of the counter function (`head`: the two) for `hits`, charging a hit that does
/// not fit when `every`.
struct CounterCall<'a> {
    head: &'a Encoded,
    hits: &'a [CountedHit],
    every: bool,
}

impl CounterCall<'_> {
    /// FCALL, the function, the count of keys, the keys, `every`, then 4 a hit.
    fn arg_count(&self) -> usize {
        4 + 5 * self.hits.len()
    }

    fn write(&self, out: &mut impl Args) {
        out.constant(self.head);
        out.number(self.hits.len() as u64);
        for hit in self.hits {
            out.bytes(hit.key.as_bytes());
        }
        out.number(u64::from(self.every));
        for hit in self.hits {
            out.number(hit.cost);
            out.number(u64::from(hit.requests_per_unit));
            match hit.window {
                WindowArg::Left(left_us) => out.number(ttl_ms(left_us)),
                WindowArg::FromFirstHit { period_us, now_us } => {
                    out.bytes(format!("f{period_us}@{now_us}").as_bytes())
                }
            }
            out.bytes(hit.role.as_str().as_bytes());
        }
    }
}

impl Command for CounterCall<'_> {
    fn write_resp(&self, out: &mut Vec<u8>) {
        self.write(&mut Resp::array(out, self.arg_count()));
    }

    fn into_cmd(self) -> Cmd {
        let keys: usize = self.hits.iter().map(|hit| hit.key.len()).sum();
        let bytes = keys + 48 * self.hits.len() + 64;
        let mut cmd = Cmd::with_capacity(self.arg_count(), bytes);
        self.write(&mut cmd);
        cmd
    }
}

/// `us` microseconds as a key's time to live in milliseconds, as the general call writes it
/// (`ttl_ms` in `lua/common.lua`): rounded up, plus one.
fn ttl_ms(us: u64) -> u64 {
    us.div_ceil(1000) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(
        key: &str,
        cost: u64,
        requests_per_unit: u32,
        role: Role,
        window: WindowArg,
    ) -> CountedHit {
        CountedHit {
            key: key.into(),
            cost,
            requests_per_unit,
            role,
            window,
        }
    }

    /// What sluice's own connection writes of a counter call is what redis-rs would send.
    #[test]
    fn the_counter_call_writes_the_bytes_redis_rs_would_send() {
        let hits = [
            hit(
                "rl:{d_k_v}:60",
                1,
                100,
                Role::Enforced,
                WindowArg::Left(59_999_001),
            ),
            hit(
                "rl:{d_k_v}:quota",
                0,
                u32::MAX,
                Role::Quota,
                WindowArg::FromFirstHit {
                    period_us: 3_600_000_000,
                    now_us: 17,
                },
            ),
        ];
        let head = Encoded::new(&[b"FCALL", b"sluice_counter_v9"]);
        for every in [false, true] {
            for count in [1, 2] {
                let counter = || CounterCall {
                    head: &head,
                    hits: &hits[..count],
                    every,
                };
                let mut written = Vec::new();
                counter().write_resp(&mut written);
                let packed = counter().into_cmd().get_packed_command();
                assert_eq!(
                    String::from_utf8_lossy(&written),
                    String::from_utf8_lossy(&packed)
                );
                assert_eq!(counter().into_cmd().args_iter().count(), 4 + 5 * count);
            }
        }
    }
}
