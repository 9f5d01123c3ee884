//! Exact money. Every amount vidgate stores or moves is an integer number of
//! micro-dollars (millionths of a US dollar); floating point only appears at
//! the JSON boundary, where the spec asks for USD numbers.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

use serde::{Deserialize, Serialize};

/// An amount of US dollars in micro-dollars (1 USD = 1_000_000).
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Micros(pub i64);

pub const MICROS_PER_USD: i64 = 1_000_000;
pub const MICROS_PER_CENT: i64 = 10_000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MoneyParseError {
    #[error("amount must be a non-negative decimal number of US dollars with at most 6 decimals")]
    Malformed,
    #[error("amount is too large")]
    TooLarge,
}

impl Micros {
    pub const ZERO: Micros = Micros(0);

    pub fn from_usd_cents(cents: i64) -> Micros {
        Micros(cents * MICROS_PER_CENT)
    }

    /// Parses a decimal dollar amount such as `"12"`, `"0.5"` or `"3.141592"`
    /// exactly, without passing through floating point.
    pub fn parse_usd(text: &str) -> Result<Micros, MoneyParseError> {
        let text = text.trim();
        let (whole, fraction) = match text.split_once('.') {
            Some((whole, fraction)) => (whole, fraction),
            None => (text, ""),
        };
        let all_digits = |part: &str| part.bytes().all(|byte| byte.is_ascii_digit());
        if whole.is_empty() && fraction.is_empty()
            || !all_digits(whole)
            || !all_digits(fraction)
            || fraction.len() > 6
        {
            return Err(MoneyParseError::Malformed);
        }
        let whole: i64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| MoneyParseError::TooLarge)?
        };
        let fraction_micros: i64 = if fraction.is_empty() {
            0
        } else {
            format!("{fraction:0<6}")
                .parse()
                .map_err(|_| MoneyParseError::Malformed)?
        };
        whole
            .checked_mul(MICROS_PER_USD)
            .and_then(|micros| micros.checked_add(fraction_micros))
            .map(Micros)
            .ok_or(MoneyParseError::TooLarge)
    }

    /// The amount as a JSON-friendly number of dollars. Exact for every amount
    /// below 2^53 micro-dollars, which is far beyond any balance.
    pub fn to_usd(self) -> f64 {
        self.0 as f64 / MICROS_PER_USD as f64
    }

    /// The amount as exact decimal dollars, with at least two decimals and
    /// no trailing zeros past them: `"1.00"`, `"0.005"`, `"-2.50"`. Money
    /// shown as text never passes through floating point, so a limit or a
    /// price of a fraction of a cent reads as what it is.
    pub fn usd_text(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let micros = self.0.unsigned_abs();
        let per_usd = MICROS_PER_USD as u64;
        let fraction = format!("{:06}", micros % per_usd);
        let fraction = fraction.trim_end_matches('0');
        format!("{sign}{}.{fraction:0<2}", micros / per_usd)
    }

    /// Rounds to the nearest whole cent, halves away from zero. Prices are
    /// charged in whole cents so that the figure a customer sees is exactly
    /// the figure the ledger moves.
    pub fn round_to_cent(self) -> Micros {
        let half = MICROS_PER_CENT / 2;
        let rounded = if self.0 >= 0 {
            (self.0 + half) / MICROS_PER_CENT
        } else {
            (self.0 - half) / MICROS_PER_CENT
        };
        Micros(rounded * MICROS_PER_CENT)
    }

    pub fn is_negative(self) -> bool {
        self.0 < 0
    }
}

impl Add for Micros {
    type Output = Micros;
    fn add(self, other: Micros) -> Micros {
        Micros(self.0 + other.0)
    }
}

impl AddAssign for Micros {
    fn add_assign(&mut self, other: Micros) {
        self.0 += other.0;
    }
}

impl Sub for Micros {
    type Output = Micros;
    fn sub(self, other: Micros) -> Micros {
        Micros(self.0 - other.0)
    }
}

impl fmt::Display for Micros {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let absolute = self.0.unsigned_abs();
        write!(
            formatter,
            "{sign}${}.{:06}",
            absolute / MICROS_PER_USD as u64,
            absolute % MICROS_PER_USD as u64
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_dollars_as_exact_text() {
        for (micros, text) in [
            (0, "0.00"),
            (1_000_000, "1.00"),
            (1_500_000, "1.50"),
            (5_000, "0.005"),
            (1, "0.000001"),
            (123_456_789, "123.456789"),
            (-2_500_000, "-2.50"),
            (-5_000, "-0.005"),
        ] {
            assert_eq!(Micros(micros).usd_text(), text, "{micros}");
            if micros >= 0 {
                assert_eq!(Micros::parse_usd(text), Ok(Micros(micros)), "{text}");
            }
        }
    }

    #[test]
    fn parses_decimal_dollars_exactly() {
        for (text, micros) in [
            ("0", 0),
            ("12", 12_000_000),
            ("0.5", 500_000),
            (".25", 250_000),
            ("3.141592", 3_141_592),
            ("10.", 10_000_000),
        ] {
            assert_eq!(Micros::parse_usd(text), Ok(Micros(micros)), "{text}");
        }
        for text in ["", ".", "-1", "1.2345678", "1e3", "abc", "1.2.3"] {
            assert_eq!(
                Micros::parse_usd(text),
                Err(MoneyParseError::Malformed),
                "{text}"
            );
        }
        assert_eq!(
            Micros::parse_usd("99999999999999999"),
            Err(MoneyParseError::TooLarge)
        );
    }

    #[test]
    fn rounds_half_away_from_zero_to_the_cent() {
        assert_eq!(Micros(281_250).round_to_cent(), Micros(280_000));
        assert_eq!(Micros(285_000).round_to_cent(), Micros(290_000));
        assert_eq!(Micros(284_999).round_to_cent(), Micros(280_000));
        assert_eq!(Micros(-285_000).round_to_cent(), Micros(-290_000));
    }

    #[test]
    fn displays_with_six_decimals() {
        assert_eq!(Micros(1_500_000).to_string(), "$1.500000");
        assert_eq!(Micros(-20).to_string(), "-$0.000020");
        assert_eq!(Micros(2_500_000).to_usd(), 2.5);
    }
}
