//! Which serving lane the current thread is. The server serves the gRPC port's connections on
//! threads of their own, one a core, and tells each thread its lane here; the Redis store
//! keeps one connection a lane (`redis::wire`), opened and served on that lane's thread, so
//! that a call, its bytes to Redis, its reply and the task the reply wakes all stay on the core
//! the call came in on. Every other thread is lane 0.

use std::cell::Cell;

thread_local! {
    static LANE: Cell<usize> = const { Cell::new(0) };
}

/// Makes the current thread lane `lane` (1 and up; 0 is every other thread's).
pub fn enter(lane: usize) {
    LANE.with(|current| current.set(lane));
}

/// The current thread's lane.
pub fn current() -> usize {
    LANE.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_lane_0_until_it_enters_another_and_lanes_are_per_thread() {
        assert_eq!(current(), 0);
        enter(3);
        assert_eq!(current(), 3);
        let other = std::thread::spawn(current).join().expect("thread");
        assert_eq!(other, 0, "another thread keeps its own lane");
    }
}
