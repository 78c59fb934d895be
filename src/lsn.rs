//! A WAL position (`XLogRecPtr`): the one LSN type of walrelay.
//!
//! PostgreSQL writes LSNs as two hexadecimal halves, `16/B374D848`. This is the only place that
//! formats or parses that text; catalog queries read `pg_lsn` columns straight into [`Lsn`]
//! (it implements tokio-postgres' `FromSql`/`ToSql` for `pg_lsn`), never through `::text`.

use std::fmt;
use std::str::FromStr;

use tokio_postgres::types::{to_sql_checked, FromSql, IsNull, PgLsn, ToSql, Type};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    pub const ZERO: Lsn = Lsn(0);

    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// Bytes of WAL from `earlier` to `self` (0 when `earlier` is not earlier).
    pub fn bytes_since(self, earlier: Lsn) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

/// `text` is not `X/Y` with two hexadecimal halves of at most 8 digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an LSN (expected two hexadecimal halves like 16/B374D848)")]
pub struct ParseLsnError(String);

impl FromStr for Lsn {
    type Err = ParseLsnError;

    fn from_str(text: &str) -> Result<Lsn, ParseLsnError> {
        let bad = || ParseLsnError(text.to_string());
        let (hi, lo) = text.trim().split_once('/').ok_or_else(bad)?;
        let half = |s: &str| {
            if s.is_empty() || s.len() > 8 {
                return Err(bad());
            }
            u64::from_str_radix(s, 16).map_err(|_| bad())
        };
        Ok(Lsn((half(hi)? << 32) | half(lo)?))
    }
}

impl From<u64> for Lsn {
    fn from(value: u64) -> Lsn {
        Lsn(value)
    }
}

impl From<Lsn> for u64 {
    fn from(value: Lsn) -> u64 {
        value.0
    }
}

impl From<pgwire_replication::Lsn> for Lsn {
    fn from(value: pgwire_replication::Lsn) -> Lsn {
        Lsn(value.0)
    }
}

impl From<Lsn> for pgwire_replication::Lsn {
    fn from(value: Lsn) -> pgwire_replication::Lsn {
        pgwire_replication::Lsn(value.0)
    }
}

impl<'a> FromSql<'a> for Lsn {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Lsn, Box<dyn std::error::Error + Sync + Send>> {
        PgLsn::from_sql(ty, raw).map(|lsn| Lsn(u64::from(lsn)))
    }

    fn accepts(ty: &Type) -> bool {
        <PgLsn as FromSql>::accepts(ty)
    }
}

impl ToSql for Lsn {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        PgLsn::from(self.0).to_sql(ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        <PgLsn as ToSql>::accepts(ty)
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_text_round_trips() {
        assert_eq!("16/B374D848".parse::<Lsn>().unwrap(), Lsn(0x16_B374_D848));
        assert_eq!(Lsn(0x16_B374_D848).to_string(), "16/B374D848");
        assert_eq!(Lsn::ZERO.to_string(), "0/0");
        assert_eq!("FFFFFFFF/FFFFFFFF".parse::<Lsn>().unwrap(), Lsn(u64::MAX));
    }

    #[test]
    fn lsn_text_that_is_not_two_hex_halves_is_refused() {
        for bad in ["nonsense", "16", "/1", "1/", "1/2/3", "G/0", "100000000/0", "-1/0"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn lsn_bytes_since_never_underflows() {
        assert_eq!(Lsn(100).bytes_since(Lsn(40)), 60);
        assert_eq!(Lsn(40).bytes_since(Lsn(100)), 0);
    }
}
