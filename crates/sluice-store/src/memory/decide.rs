//! How the memory store decides: one hit under its shard's lock (written in place when it
//! can be), or a request under the locks of every shard it touches, by the request's rules
//! (`engine::decide`), at the time read once the locks are held, its writes made only when
//! there is room for all.

use std::sync::MutexGuard;

use smallvec::SmallVec;

use super::{footprint, live, overwrite, readable, KeyId, MemoryStore, Shard};
use crate::key::Shape;
use crate::StoreError;
use sluice_core::algorithm::State;
use sluice_core::engine::{self, Charging, Of, Part};
use sluice_core::limit::{Decision, Hit};

/// Whether the state of `part` of `hits` names a fixed window (a modifier's never does).
fn holds_window(hits: &[Hit], part: Part) -> bool {
    part.of == Of::Limit && hits[part.hit].limit.key_holds_window()
}

/// The state at `place` (its id, and the position of its shard in `shards`), as `live`
/// reads it.
fn held_state<'a>(
    shards: &'a [MutexGuard<'_, Shard>],
    (id, position): (KeyId, usize),
    holds_window: bool,
    now_us: u64,
) -> Option<&'a State> {
    live(&shards[position], &id, holds_window, now_us)
}

/// `id` (from `hashed`) at `now_us`: a fixed window's start folded in.
pub(super) fn at_time(id: KeyId, hit: &Hit, now_us: u64) -> KeyId {
    match Shape::of(&hit.limit, now_us) {
        Shape::Window { start_s } => KeyId(id.0 ^ start_s, id.1),
        Shape::Limited { .. } => id,
    }
}

/// `decision`, decided at `now_us`.
fn stamped(decision: Decision, now_us: u64) -> Decision {
    Decision {
        decided_at_us: now_us,
        ..decision
    }
}

impl MemoryStore {
    /// Decides one hit, reading the time once its shard is locked (`Decision::decided_at_us`).
    pub(super) fn charge_one(&self, hit: &Hit, charging: Charging) -> Result<Decision, StoreError> {
        let (id, index) = self.hashed(hit);
        let mut shard = self.lock(index);
        let now_us = self.clock.now_us();
        let id = at_time(id, hit, now_us);
        self.charge_one_locked(&mut shard, id, hit, charging, now_us)
            .map(|decision| stamped(decision, now_us))
    }

    fn charge_one_locked(
        &self,
        shard: &mut Shard,
        id: KeyId,
        hit: &Hit,
        charging: Charging,
        now_us: u64,
    ) -> Result<Decision, StoreError> {
        // A held key whose state does not grow (every algorithm but a log past its block):
        // one lookup, written in place.
        let Shard {
            entries,
            state_bytes,
            ..
        } = &mut *shard;
        let (outcome, needs) = match entries.get_mut(&id) {
            Some(entry) => {
                let holds_window = hit.limit.key_holds_window();
                let live = readable(entry, holds_window, now_us).then_some(&entry.state);
                let outcome = engine::decide_hit(hit, charging, live, now_us);
                let Some((state, _)) = &outcome.new_state else {
                    return Ok(outcome.decision);
                };
                let held = footprint::heap_bytes(&entry.state);
                let after = footprint::heap_bytes_held(Some(&entry.state), state);
                if after <= held {
                    let decision = outcome.decision;
                    if let Some((state, expires_at_us)) = outcome.new_state {
                        overwrite(entry, state_bytes, holds_window, state, expires_at_us);
                    }
                    return Ok(decision);
                }
                (outcome, (0, after - held))
            }
            None => {
                let outcome = engine::decide_hit(hit, charging, None, now_us);
                let needs = match &outcome.new_state {
                    Some((state, _)) => (1, footprint::heap_bytes_held(None, state)),
                    None => return Ok(outcome.decision),
                };
                (outcome, needs)
            }
        };
        let (new_keys, grows) = needs;
        if !self.room(shard, new_keys, grows, now_us) {
            return Err(self.no_room());
        }
        if let Some((state, expires_at_us)) = outcome.new_state {
            shard.write(id, hit.limit.key_holds_window(), state, expires_at_us);
        }
        Ok(outcome.decision)
    }

    /// Decides a request's hits under the locks of every shard they touch (their limits'
    /// states and the parts their modifiers keep), taken in shard order (so two requests never
    /// wait on each other in a cycle), by the request's rules (`engine::decide`), at the
    /// time read once they are all held; the writes are made only if there is room for all.
    pub(super) fn charge_request(
        &self,
        hits: &[Hit],
        charging: Charging,
    ) -> Result<Vec<Decision>, StoreError> {
        let parts = Part::of_request(hits);
        let mut placed: SmallVec<[(KeyId, usize); 4]> = parts
            .iter()
            .map(|&part| self.hashed_part(hits, part))
            .collect();
        let mut indices: SmallVec<[usize; 4]> = placed.iter().map(|&(_, index)| index).collect();
        indices.sort_unstable();
        indices.dedup();
        let mut shards: SmallVec<[MutexGuard<'_, Shard>; 4]> =
            indices.iter().map(|&index| self.lock(index)).collect();
        // Every index is in `indices`: the shards are locked in its order. From here each part
        // has its key at this time and the position of its shard among those locked.
        let now_us = self.clock.now_us();
        for (part, (id, index)) in parts.iter().zip(placed.iter_mut()) {
            *index = indices.iter().position(|&i| i == *index).unwrap_or(0);
            if part.of == Of::Limit {
                *id = at_time(*id, &hits[part.hit], now_us);
            }
        }
        let place = |part: Part| {
            let at = parts.iter().position(|&p| p == part).unwrap_or(0);
            placed[at]
        };
        let mut plan = {
            let held = &shards[..];
            engine::decide(
                hits,
                |part| place(part).0,
                charging,
                now_us,
                |part| held_state(held, place(part), holds_window(hits, part), now_us),
            )
        };
        let writes = plan.take_writes();
        self.make_room(&mut shards, &writes, |part| place(part).1, now_us)?;
        for write in writes {
            let holds = holds_window(hits, write.part());
            let position = place(write.part()).1;
            shards[position].write(write.key, holds, write.state, write.expires_at_us);
        }
        let held = &shards[..];
        let decisions = plan.answers(hits, now_us, |i| {
            held_state(
                held,
                place(Part::limit(i)),
                holds_window(hits, Part::limit(i)),
                now_us,
            )
        });
        Ok(decisions
            .into_iter()
            .map(|decision| stamped(decision, now_us))
            .collect())
    }

    /// Makes room for `writes` in the shards they go to (`position(hit)` in `shards`): new
    /// keys and added bytes (a write that neither adds a key nor grows its state always fits);
    /// an error when some shard has none.
    fn make_room(
        &self,
        shards: &mut [MutexGuard<'_, Shard>],
        writes: &[engine::Write<KeyId>],
        position: impl Fn(Part) -> usize,
        now_us: u64,
    ) -> Result<(), StoreError> {
        let mut needs: SmallVec<[(usize, usize, usize); 4]> = SmallVec::new();
        for write in writes {
            let position = position(write.part());
            let (new_key, grows) = shards[position].needs(&write.key, &write.state);
            if new_key == 0 && grows == 0 {
                continue;
            }
            match needs.iter_mut().find(|n| n.0 == position) {
                Some(need) => {
                    need.1 += new_key;
                    need.2 += grows;
                }
                None => needs.push((position, new_key, grows)),
            }
        }
        for (position, new_keys, grows) in needs {
            if !self.room(&mut shards[position], new_keys, grows, now_us) {
                return Err(self.no_room());
            }
        }
        Ok(())
    }
}
