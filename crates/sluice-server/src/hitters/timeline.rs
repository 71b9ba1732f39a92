//! A limit's hits and denials over the last hour, in 10-second steps: 360 slots, each
//! emptied and reused when its time comes round again.

use serde::{Deserialize, Serialize};

/// Seconds a step.
const STEP: u64 = 10;
/// Steps kept: an hour.
const STEPS: usize = 360;

/// One step: its start (seconds since the epoch), its hits and its denials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    pub at: u64,
    pub hits: u64,
    pub denials: u64,
}

pub struct Timeline {
    steps: Vec<Point>,
}

impl Timeline {
    pub fn new() -> Timeline {
        Timeline {
            steps: vec![
                Point {
                    at: u64::MAX,
                    hits: 0,
                    denials: 0,
                };
                STEPS
            ],
        }
    }

    /// Counts `cost` hits at second `now`, denied or not.
    pub fn add(&mut self, now: u64, cost: u64, denied: bool) {
        let at = now - now % STEP;
        let step = &mut self.steps[((now / STEP) % STEPS as u64) as usize];
        if step.at != at {
            *step = Point {
                at,
                hits: 0,
                denials: 0,
            };
        }
        step.hits = step.hits.saturating_add(cost);
        if denied {
            step.denials = step.denials.saturating_add(cost);
        }
    }

    /// The steps of the last hour at second `now` that saw a hit, oldest first.
    pub fn points(&self, now: u64) -> Vec<Point> {
        let oldest = now.saturating_sub(STEP * STEPS as u64);
        let mut points: Vec<Point> = self
            .steps
            .iter()
            .filter(|p| p.at != u64::MAX && p.at > oldest && p.at <= now)
            .copied()
            .collect();
        points.sort_by_key(|p| p.at);
        points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_an_hour_in_ten_second_steps() {
        let mut timeline = Timeline::new();
        timeline.add(1_000, 2, false);
        timeline.add(1_005, 1, true);
        timeline.add(1_012, 1, false);
        let points = timeline.points(1_015);
        assert_eq!(
            points,
            [
                Point {
                    at: 1_000,
                    hits: 3,
                    denials: 1
                },
                Point {
                    at: 1_010,
                    hits: 1,
                    denials: 0
                }
            ]
        );
        // An hour on, the first step has left.
        assert_eq!(timeline.points(1_000 + 3_600).len(), 1);
        // Its slot, reused, starts again.
        timeline.add(1_000 + 3_600, 1, false);
        assert_eq!(
            timeline.points(4_600)[1],
            Point {
                at: 4_600,
                hits: 1,
                denials: 0
            }
        );
    }
}
