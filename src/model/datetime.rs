//! ISO-8601 datetimes as BEHAVIOUR.md §1 accepts them:
//! `YYYY-MM-DDTHH:MM[:SS[.f{1,9}]][Z|±HH:MM]` or a plain date `YYYY-MM-DD`.
//! A value without an offset means UTC. Comparisons use the instant.

/// An instant: seconds since the Unix epoch (UTC) and nanoseconds within the second.
/// Ordering of the pair is the ordering of instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    pub secs: i64,
    pub nanos: u32,
}

fn digits(b: &[u8], from: usize, n: usize) -> Option<i64> {
    let s = b.get(from..from + n)?;
    let mut v: i64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(c - b'0');
    }
    Some(v)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// Days in month `m` (1..=12) of year `y` (proleptic Gregorian).
pub fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if is_leap(y) => 29,
        _ => 28,
    }
}

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// Civil date from days since the epoch.
pub fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// An instant in whole seconds as `YYYY-MM-DDTHH:MM:SSZ`. Years outside 0000..9999 take
/// ISO 8601's expanded form: a sign and at least four digits (`-0001`, `+10000`).
pub fn iso(secs: i64) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(86400));
    let s = secs.rem_euclid(86400);
    let year = match y {
        0..=9999 => format!("{y:04}"),
        y if y < 0 => format!("-{:04}", -(y as i128)),
        y => format!("+{y:04}"),
    };
    format!(
        "{year}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// The current time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn now_iso() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let whole = iso(d.as_secs() as i64);
    format!("{}.{:03}Z", &whole[..whole.len() - 1], d.subsec_millis())
}

/// Parses a datetime, returning its instant, or None when the text is not one.
pub fn parse(s: &str) -> Option<Instant> {
    let b = s.as_bytes();
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, mo, d) = (digits(b, 0, 4)?, digits(b, 5, 2)?, digits(b, 8, 2)?);
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    if b.len() == 10 {
        return Some(Instant {
            secs: days * 86400,
            nanos: 0,
        });
    }
    if b[10] != b'T' || b.len() < 16 || b[13] != b':' {
        return None;
    }
    let (h, mi) = (digits(b, 11, 2)?, digits(b, 14, 2)?);
    if h > 23 || mi > 59 {
        return None;
    }
    let mut i = 16;
    let mut sec = 0;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b':') {
        sec = digits(b, i + 1, 2)?;
        if sec > 59 {
            return None;
        }
        i += 3;
        if b.get(i) == Some(&b'.') {
            let start = i + 1;
            let mut j = start;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let n = j - start;
            if n == 0 || n > 9 {
                return None;
            }
            let frac = digits(b, start, n)?;
            nanos = (frac * 10i64.pow((9 - n) as u32)) as u32;
            i = j;
        }
    }
    let mut offset = 0i64;
    match b.get(i) {
        None => {}
        Some(b'Z') if i + 1 == b.len() => {}
        Some(&c @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (digits(b, i + 1, 2)?, digits(b, i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            offset = (oh * 3600 + om * 60) * if c == b'+' { 1 } else { -1 };
        }
        _ => return None,
    }
    Some(Instant {
        secs: days * 86400 + h * 3600 + mi * 60 + sec - offset,
        nanos,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_years_outside_four_digits_are_expanded() {
        assert_eq!(super::iso(0), "1970-01-01T00:00:00Z");
        // 0000-01-01T00:00:00+01:00 is 1 hour before year 0
        let y0 = super::parse("0000-01-01T00:00:00Z").unwrap().secs;
        assert_eq!(super::iso(y0), "0000-01-01T00:00:00Z");
        assert_eq!(super::iso(y0 - 3600), "-0001-12-31T23:00:00Z");
        let y9999 = super::parse("9999-12-31T23:59:59Z").unwrap().secs;
        assert_eq!(super::iso(y9999 + 1), "+10000-01-01T00:00:00Z");
    }

    use super::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse("1970-01-01").unwrap(), Instant { secs: 0, nanos: 0 });
        assert_eq!(parse("1970-01-01T00:01").unwrap().secs, 60);
        assert_eq!(parse("1970-01-01T00:00:01Z").unwrap().secs, 1);
        assert_eq!(
            parse("1970-01-01T00:00:00.5Z").unwrap(),
            Instant {
                secs: 0,
                nanos: 500_000_000
            }
        );
        assert_eq!(parse("1970-01-01T01:00:00+01:00").unwrap().secs, 0);
        assert_eq!(
            parse("2024-02-29T12:00:00.123456789-05:30").unwrap().nanos,
            123456789
        );
        assert_eq!(parse("2000-03-01").unwrap().secs, 951868800);
        assert!(parse("1969-12-31T23:59:59Z").unwrap().secs == -1);
    }

    #[test]
    fn refuses_near_misses() {
        for s in [
            "2023-02-29",
            "2023-13-01",
            "2023-1-01",
            "2023-01-01T",
            "2023-01-01T24:00",
            "2023-01-01 10:00",
            "2023-01-01T10:00:00.Z",
            "2023-01-01T10:00:00.1234567890Z",
            "2023-01-01T10:00+0100",
            "hello",
            "2023-01-01Tab:00",
            "2023-01-01T10:00:00ZZ",
        ] {
            assert!(parse(s).is_none(), "{s} should not parse");
        }
    }
}
