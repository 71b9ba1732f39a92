//! Kuadrant's protocol's settings, under Limitador's flags (docs/kuadrant.md): whether its
//! `Reserve` and `Commit` are served, the largest share of a limit one reservation may hold,
//! and the longest a hold may last.

use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::{ArgAction, Args};

use super::SettingsError;
use crate::kuadrant::Holds;

/// The flags of Kuadrant's protocol.
#[derive(Debug, Clone, Args)]
pub struct KuadrantArgs {
    /// Kuadrant's Reserve and Commit answer UNIMPLEMENTED (Limitador's flag).
    #[arg(long, env = "DISABLE_RESERVATIONS", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub disable_reservations: bool,
    /// The largest share of a limit one Kuadrant reservation holds: above 0, at most 1
    /// (Limitador's flag and default).
    #[arg(long, env = "MAX_RESERVATION_FRACTION", default_value_t = 0.5)]
    pub max_reservation_fraction: f64,
    /// The longest a Kuadrant reservation holds, in seconds (Limitador's flag and default);
    /// a Reserve without a ttl holds this long, one with a longer ttl this long.
    #[arg(long, env = "MAX_RESERVATION_TTL", default_value_t = 60)]
    pub max_reservation_ttl: u64,
    /// Limitador's `limited_calls` by `limit_name` too (Limitador's flag and variable).
    #[arg(long, env = "LIMIT_NAME_IN_PROMETHEUS_LABELS", action = ArgAction::SetTrue, value_parser = FalseyValueParser::new())]
    pub limit_name_in_labels: bool,
}

/// Kuadrant's protocol's validated settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KuadrantSettings {
    /// What a request in flight may hold; `None` when Reserve and Commit are off.
    pub holds: Option<Holds>,
    pub limit_name_in_labels: bool,
}

/// Millionths: the reserve modifier's scale for a share of a limit.
const PPM: f64 = 1_000_000.0;

impl KuadrantArgs {
    /// The settings, or the refusal of a bound out of range (`holds`).
    pub fn into_settings(self) -> Result<KuadrantSettings, SettingsError> {
        Ok(KuadrantSettings {
            holds: self.holds()?,
            limit_name_in_labels: self.limit_name_in_labels,
        })
    }

    /// The reservations served, `None` when they are off; refused: a fraction outside
    /// (0, 1], a ttl of 0.
    pub fn holds(&self) -> Result<Option<Holds>, SettingsError> {
        let fraction = self.max_reservation_fraction;
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(SettingsError::Ratio {
                setting: "--max-reservation-fraction",
                value: fraction,
            });
        }
        if self.max_reservation_ttl == 0 {
            return Err(SettingsError::Zero {
                setting: "--max-reservation-ttl",
            });
        }
        if self.disable_reservations {
            return Ok(None);
        }
        // At least one millionth: a positive fraction never rounds to nothing.
        let max_fraction_ppm = ((fraction * PPM).round() as u32).max(1);
        Ok(Some(Holds {
            max_fraction_ppm,
            max_ttl: Duration::from_secs(self.max_reservation_ttl),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(fraction: f64, ttl: u64, disabled: bool) -> KuadrantArgs {
        KuadrantArgs {
            disable_reservations: disabled,
            max_reservation_fraction: fraction,
            max_reservation_ttl: ttl,
            limit_name_in_labels: false,
        }
    }

    #[test]
    fn a_fraction_outside_zero_to_one_or_a_zero_ttl_is_refused() {
        for fraction in [0.0, -0.1, 1.01, f64::NAN] {
            let refused = args(fraction, 60, false).holds().unwrap_err();
            assert!(refused.to_string().contains("--max-reservation-fraction"));
        }
        let refused = args(0.5, 0, false).holds().unwrap_err();
        assert!(refused.to_string().contains("--max-reservation-ttl"));
    }

    #[test]
    fn the_defaults_are_limitadors_and_disabling_serves_none() {
        let served = args(0.5, 60, false).holds().unwrap().unwrap();
        assert_eq!(served.max_fraction_ppm, 500_000);
        assert_eq!(served.max_ttl, Duration::from_secs(60));
        assert_eq!(args(1.0, 1, true).holds().unwrap(), None);
    }
}
