//! Max-min fair shares of one limit among the clients that want it: a client that wants less
//! than an equal split gets what it wants, and what it leaves is split among the others.
//! Integers only; the shares never add up to more than the limit.

/// The max-min fair share of each of `demands` (in the order given) out of `limit`.
pub fn max_min_fair(limit: u64, demands: &[u64]) -> Vec<u64> {
    let mut order: Vec<usize> = (0..demands.len()).collect();
    order.sort_by_key(|&i| (demands[i], i));
    let mut shares = vec![0; demands.len()];
    let sorted = order.iter().map(|&i| demands[i]);
    for (&i, share) in order.iter().zip(shares_in_demand_order(limit, sorted)) {
        shares[i] = share;
    }
    shares
}

/// The max-min fair shares of demands already in ascending order (ties in the order the
/// remainder should go), in that order: what `max_min_fair` computes after its sort, for a
/// caller that keeps its own order and may stop at the share it wants.
pub fn shares_in_demand_order(
    limit: u64,
    sorted: impl ExactSizeIterator<Item = u64>,
) -> impl Iterator<Item = u64> {
    let count = sorted.len();
    let mut left = limit;
    sorted.enumerate().map(move |(served, demand)| {
        let waiting = (count - served) as u64;
        let equal = left / waiting;
        // The first clients of an uneven split get the remainder, one each.
        let extra = u64::from(left % waiting > 0 && demand > equal);
        let share = demand.min(equal + extra);
        left -= share;
        share
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn small_demands_are_met_and_the_rest_is_split() {
        assert_eq!(max_min_fair(1000, &[100, 900, 900]), [100, 450, 450]);
        assert_eq!(
            max_min_fair(1000, &[50, 100, 2000, 3000, 5000]),
            [50, 100, 284, 283, 283]
        );
        assert_eq!(max_min_fair(10, &[1, 2, 3]), [1, 2, 3]);
        assert_eq!(max_min_fair(10, &[]), Vec::<u64>::new());
        assert_eq!(max_min_fair(0, &[5, 5]), [0, 0]);
    }

    proptest! {
        #[test]
        fn shares_are_max_min_fair(limit in 0u64..10_000, demands in prop::collection::vec(0u64..5_000, 0..12)) {
            let shares = max_min_fair(limit, &demands);
            let total: u64 = shares.iter().sum();
            prop_assert!(total <= limit);
            for (share, demand) in shares.iter().zip(&demands) {
                prop_assert!(share <= demand);
            }
            // Nothing is left over while someone wants more.
            let wanted: u64 = demands.iter().sum();
            prop_assert_eq!(total, limit.min(wanted));
            // A client short of its demand gets at least every other share, less one.
            for (i, share) in shares.iter().enumerate() {
                if *share < demands[i] {
                    prop_assert!(shares.iter().all(|other| *other <= share + 1));
                }
            }
        }
    }
}
