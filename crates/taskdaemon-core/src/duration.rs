//! Durations as people write them on a command line: `90s`, `15m`, `2h`, `1h30m`, `500ms`.

use std::time::Duration;

/// The longest duration taskdaemon takes anywhere (timeouts, budgets, retention): a year.
/// Longer values would overflow the clock arithmetic; they are refused, never a panic.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 86400);

/// `Err` with a hint when `d` exceeds [`MAX_DURATION`].
pub fn check_bound(input: &str, d: Duration) -> Result<Duration, String> {
    if d > MAX_DURATION {
        return Err(format!(
            "`{input}` is too long; the longest duration taskdaemon accepts is 366d"
        ));
    }
    Ok(d)
}

/// Parse `90s`, `15m`, `2h`, `1d`, `500ms` or a combination such as `1h30m` (jiff's
/// friendly format, days of 24 hours). A bare number is refused: `10` could be seconds or
/// minutes, and a timeout read the wrong way ends work or lets it run all night. Returns a
/// message saying what was wrong; values over [`MAX_DURATION`] and overflows are refused.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty duration; write it like 90s, 15m or 2h".into());
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(no_unit(s));
    }
    let hint = "write it like 90s, 15m, 2h or 1h30m (units ms, s, m, h, d; at most 366d)";
    // One word, no sign, no ISO 8601: jiff would also take `1 hour ago` or `PT1H`.
    if !s.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        || s.contains(|c: char| c.is_whitespace() || c == ',')
    {
        return Err(format!("`{input}` is not a duration; {hint}"));
    }
    let span: jiff::Span = s
        .parse()
        .map_err(|e| format!("`{input}` is not a duration, or too long ({e}); {hint}"))?;
    if span.get_years() != 0 || span.get_months() != 0 {
        // Years and months have no fixed length.
        return Err(format!(
            "`{input}`: years and months have no fixed length; give days (366d at most); {hint}"
        ));
    }
    let signed = span
        .to_duration(jiff::SpanRelativeTo::days_are_24_hours())
        .map_err(|e| format!("`{input}`: {e}; {hint}"))?;
    let d = Duration::try_from(signed).map_err(|_| format!("`{input}` is negative; {hint}"))?;
    check_bound(input, d)
}

/// The message for a number without a unit.
pub fn no_unit(number: &str) -> String {
    format!(
        "`{number}` has no unit; write {number}s for seconds (or {number}m, {number}h; units ms, s, m, h, d)"
    )
}

/// Format a duration for people: `850ms`, `42s`, `3m 05s`, `1h 02m`.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    if secs < 60 {
        return format!("{:.1}s", d.as_secs_f64());
    }
    if secs < 3600 {
        return format!("{}m {:02}s", secs / 60, secs % 60);
    }
    format!("{}h {:02}m", secs / 3600, (secs % 3600) / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        for vague in ["1y", "2mo", "1y2d", "1month"] {
            let e = parse_duration(vague).unwrap_err();
            assert!(e.contains("no fixed length") && !e.contains("jiff"), "{e}");
        }
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(7 * 86400)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        // A bare number could mean seconds or minutes: it says how to write it.
        let e = parse_duration("45").unwrap_err();
        assert!(e.contains("`45` has no unit; write 45s for seconds"), "{e}");
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2sec"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("3mins"), Ok(Duration::from_secs(180)));
        assert_eq!(parse_duration("1hrs"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1d12h"), Ok(Duration::from_secs(36 * 3600)));
        for other in ["-1h", "1h ago", "PT1H", "1 hour", "+5s"] {
            assert!(parse_duration(other).is_err(), "{other}");
        }
    }

    #[test]
    fn rejects_garbage_with_a_hint() {
        for bad in ["", "abc", "10x", "s", "5 m"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(
                e.contains("ms, s, m, h") || e.contains("like 90s"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn huge_values_are_refused_not_a_panic() {
        for bad in [
            "99999999999999999999h",
            "99999999999999999999",
            "18446744073709551615",
            "367d",
            "1e400h",
            "9999999999999999999999999999999999999999999999999999999999.9s",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("too long") || e.contains("unit"), "{bad}: {e}");
        }
        assert_eq!(parse_duration("366d"), Ok(MAX_DURATION));
        assert!(parse_duration(".").is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
        #[test]
        fn never_panics(s in "\\PC{0,30}", n in proptest::num::u64::ANY, u in "(ms|s|m|h|d|x|)") {
            let _ = parse_duration(&s);
            let _ = parse_duration(&format!("{n}{u}"));
            let _ = parse_duration(&format!("{n}.{n}{u}{n}{u}"));
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(format_duration(Duration::from_secs(185)), "3m 05s");
        assert_eq!(format_duration(Duration::from_secs(3720)), "1h 02m");
    }
}
