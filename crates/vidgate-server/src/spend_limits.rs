//! Spend limits per API key (issue 41): how much one key may spend per UTC
//! day, per UTC month or in total, and when each period starts and resets.
//! Only arithmetic on times here; the store checks a limit in the
//! transaction that takes a submit's hold (`store/submit.rs` and migration
//! 0021), and counts what the key's generations of the period hold or were
//! charged, so a hold counts while its job runs and a refund gives the room
//! back.

use time::OffsetDateTime;
use vidgate_core::Micros;

const DAY_MILLIS: i64 = 24 * 60 * 60 * 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendPeriod {
    Day,
    Month,
    Total,
}

impl SpendPeriod {
    pub fn as_str(self) -> &'static str {
        match self {
            SpendPeriod::Day => "day",
            SpendPeriod::Month => "month",
            SpendPeriod::Total => "total",
        }
    }

    /// Where the period that holds `now` (Unix ms) began: UTC midnight, the
    /// first of the UTC month, or the beginning of time.
    pub fn start(self, now: i64) -> i64 {
        match self {
            SpendPeriod::Day => now.div_euclid(DAY_MILLIS) * DAY_MILLIS,
            SpendPeriod::Month => {
                let today = utc(now);
                month_start(today.year(), today.month())
            }
            SpendPeriod::Total => 0,
        }
    }

    /// When the period that holds `now` ends and the limit's room is whole
    /// again; never for a total limit.
    pub fn resets_at(self, now: i64) -> Option<i64> {
        match self {
            SpendPeriod::Day => Some(self.start(now) + DAY_MILLIS),
            SpendPeriod::Month => {
                let today = utc(now);
                let (year, month) = match today.month() {
                    time::Month::December => (today.year() + 1, time::Month::January),
                    month => (today.year(), month.next()),
                };
                Some(month_start(year, month))
            }
            SpendPeriod::Total => None,
        }
    }
}

impl std::str::FromStr for SpendPeriod {
    type Err = String;

    fn from_str(text: &str) -> Result<SpendPeriod, String> {
        match text {
            "day" => Ok(SpendPeriod::Day),
            "month" => Ok(SpendPeriod::Month),
            "total" => Ok(SpendPeriod::Total),
            other => Err(format!(
                "unknown spend limit period {other:?}: use day, month or total"
            )),
        }
    }
}

/// A key's limit: at most `amount` per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendLimit {
    pub amount: Micros,
    pub period: SpendPeriod,
}

/// Why a limit as given (by the operator API or the dashboard) is refused:
/// the field at fault and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SpendLimitInputError {
    pub param: &'static str,
    pub message: String,
}

/// The limit `amount_usd` per `period` as written (`"1.00"`, `"day"`), or
/// no limit when `amount_usd` is absent or empty.
pub fn parse_spend_limit(
    amount_usd: Option<&str>,
    period: Option<&str>,
) -> Result<Option<SpendLimit>, SpendLimitInputError> {
    let Some(amount_usd) = amount_usd
        .map(str::trim)
        .filter(|amount| !amount.is_empty())
    else {
        return Ok(None);
    };
    let amount = Micros::parse_usd(amount_usd).map_err(|_| SpendLimitInputError {
        param: "spend_limit_usd",
        message: "spend_limit_usd must be a dollar amount such as \"1.00\".".into(),
    })?;
    let period = period
        .unwrap_or_default()
        .parse()
        .map_err(|_| SpendLimitInputError {
            param: "spend_limit_period",
            message: "spend_limit_period must be day, month or total.".into(),
        })?;
    Ok(Some(SpendLimit { amount, period }))
}

fn utc(unix_millis: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(unix_millis as i128 * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

fn month_start(year: i32, month: time::Month) -> i64 {
    let first = time::Date::from_calendar_date(year, month, 1).unwrap_or(time::Date::MIN);
    first.midnight().assume_utc().unix_timestamp() * 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-31T23:59:59.999Z and 2027-01-01T00:00:00Z.
    const LAST_MILLISECOND_OF_2026: i64 = 1_798_761_599_999;
    const NEW_YEAR_2027: i64 = 1_798_761_600_000;

    #[test]
    fn periods_start_and_reset_at_utc_boundaries() {
        let now = LAST_MILLISECOND_OF_2026;
        assert_eq!(SpendPeriod::Day.start(now), NEW_YEAR_2027 - DAY_MILLIS);
        assert_eq!(SpendPeriod::Day.resets_at(now), Some(NEW_YEAR_2027));
        // December 2026 began 31 days before the new year.
        assert_eq!(
            SpendPeriod::Month.start(now),
            NEW_YEAR_2027 - 31 * DAY_MILLIS
        );
        assert_eq!(SpendPeriod::Month.resets_at(now), Some(NEW_YEAR_2027));
        assert_eq!(SpendPeriod::Month.start(NEW_YEAR_2027), NEW_YEAR_2027);
        assert_eq!(SpendPeriod::Total.start(now), 0);
        assert_eq!(SpendPeriod::Total.resets_at(now), None);
    }

    #[test]
    fn limits_are_read_as_written_and_an_empty_amount_removes_one() {
        assert_eq!(
            parse_spend_limit(Some("1.00"), Some("day")),
            Ok(Some(SpendLimit {
                amount: Micros(1_000_000),
                period: SpendPeriod::Day
            }))
        );
        assert_eq!(parse_spend_limit(None, None), Ok(None));
        assert_eq!(parse_spend_limit(Some(" "), Some("day")), Ok(None));
        assert_eq!(
            parse_spend_limit(Some("lots"), Some("day"))
                .unwrap_err()
                .param,
            "spend_limit_usd"
        );
        assert_eq!(
            parse_spend_limit(Some("1"), Some("week"))
                .unwrap_err()
                .param,
            "spend_limit_period"
        );
        assert_eq!(
            parse_spend_limit(Some("1"), None).unwrap_err().param,
            "spend_limit_period"
        );
    }

    #[test]
    fn periods_are_named_as_the_api_writes_them() {
        for period in [SpendPeriod::Day, SpendPeriod::Month, SpendPeriod::Total] {
            assert_eq!(period.as_str().parse::<SpendPeriod>(), Ok(period));
        }
        assert!("week".parse::<SpendPeriod>().is_err());
    }
}
