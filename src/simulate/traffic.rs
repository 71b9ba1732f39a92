//! Synthetic traffic for `sluice simulate`: a steady rate plus bursts, as request times on a
//! virtual clock, and the parsers for its command-line forms (`20/s`, `10s:50`, `500ms`).

use sluice_core::duration;

/// Why a traffic description cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrafficError {
    #[error("'{0}' is not a duration (e.g. 500ms, 10s, 2m, 1h)")]
    Duration(String),
    #[error("'{0}' is not a rate (e.g. 20/s, 100/m, 5/10s)")]
    Rate(String),
    #[error("'{0}' is not a burst (TIME:COUNT, e.g. 10s:50)")]
    Burst(String),
}

/// Requests per period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub requests: u64,
    pub per_us: u64,
}

/// `count` requests at once at `at_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Burst {
    pub at_us: u64,
    pub count: u64,
}

/// A traffic pattern over `duration_us`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Traffic {
    pub rate: Rate,
    pub bursts: Vec<Burst>,
    pub duration_us: u64,
}

impl Traffic {
    /// Request times, ascending: the steady rate evenly spaced from 0, then the bursts.
    pub fn times_us(&self) -> Vec<u64> {
        let mut times = Vec::new();
        if self.rate.requests > 0 && self.rate.per_us > 0 {
            let (requests, per) = (u128::from(self.rate.requests), u128::from(self.rate.per_us));
            let mut index: u128 = 0;
            loop {
                let at = u64::try_from(index * per / requests).unwrap_or(u64::MAX);
                if at >= self.duration_us {
                    break;
                }
                times.push(at);
                index += 1;
            }
        }
        for burst in self.bursts.iter().filter(|b| b.at_us < self.duration_us) {
            times.extend(std::iter::repeat_n(burst.at_us, burst.count as usize));
        }
        times.sort_unstable();
        times
    }
}

/// Parses a duration (`500ms`, `10s`, `2m`, ...) into microseconds.
pub fn parse_duration_us(text: &str) -> Result<u64, TrafficError> {
    duration::parse_us(text).map_err(|_| TrafficError::Duration(text.to_string()))
}

/// Parses `N/s`, `N/m`, `N/h` or `N/<duration>`.
pub fn parse_rate(text: &str) -> Result<Rate, TrafficError> {
    let error = || TrafficError::Rate(text.to_string());
    let (requests, per) = text.split_once('/').ok_or_else(error)?;
    let requests = requests.trim().parse().map_err(|_| error())?;
    let per = if per.starts_with(|c: char| c.is_ascii_digit()) {
        per.to_string()
    } else {
        format!("1{per}")
    };
    let per_us = parse_duration_us(&per).map_err(|_| error())?;
    if per_us == 0 {
        return Err(error());
    }
    Ok(Rate { requests, per_us })
}

/// Parses `TIME:COUNT`, e.g. `10s:50`.
pub fn parse_burst(text: &str) -> Result<Burst, TrafficError> {
    let error = || TrafficError::Burst(text.to_string());
    let (at, count) = text.split_once(':').ok_or_else(error)?;
    Ok(Burst {
        at_us: parse_duration_us(at).map_err(|_| error())?,
        count: count.trim().parse().map_err(|_| error())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_command_line_forms() {
        assert!(parse_duration_us("7 parsecs").is_err());
        assert_eq!(
            parse_rate("20/s"),
            Ok(Rate {
                requests: 20,
                per_us: 1_000_000
            })
        );
        assert_eq!(
            parse_rate("5/10s"),
            Ok(Rate {
                requests: 5,
                per_us: 10_000_000
            })
        );
        assert!(parse_rate("20").is_err());
        assert_eq!(
            parse_burst("10s:50"),
            Ok(Burst {
                at_us: 10_000_000,
                count: 50
            })
        );
    }

    #[test]
    fn steady_rate_is_evenly_spaced_and_bursts_join_it() {
        let traffic = Traffic {
            rate: Rate {
                requests: 4,
                per_us: 1_000_000,
            },
            bursts: vec![Burst {
                at_us: 500_000,
                count: 2,
            }],
            duration_us: 1_000_000,
        };
        assert_eq!(
            traffic.times_us(),
            [0, 250_000, 500_000, 500_000, 500_000, 750_000]
        );
    }
}
