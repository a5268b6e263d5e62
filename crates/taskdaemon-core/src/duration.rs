//! Durations as people write them on a command line: `90s`, `15m`, `2h`, `1h30m`, `500ms`.

use std::time::Duration;

/// Parse `90s`, `15m`, `2h`, `1d`, `500ms` or a combination such as `1h30m`. A bare number
/// means seconds. Returns a message saying what was wrong.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty duration; write it like 90s, 15m or 2h".into());
    }
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "`{input}` is not a duration; write it like 90s, 15m or 2h"
            ));
        }
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| format!("`{input}` is not a duration; write it like 90s, 15m or 2h"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let factor = match unit {
            "ms" => 0.001,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" | "hr" | "hrs" => 3600.0,
            "d" => 86400.0,
            "" => {
                return Err(format!(
                    "`{input}`: missing unit after {number}; use ms, s, m, h or d"
                ));
            }
            other => {
                return Err(format!(
                    "`{input}`: unknown unit `{other}`; use ms, s, m, h or d"
                ));
            }
        };
        total += Duration::from_secs_f64(number * factor);
    }
    Ok(total)
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
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
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
    fn formats() {
        assert_eq!(format_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(format_duration(Duration::from_secs(185)), "3m 05s");
        assert_eq!(format_duration(Duration::from_secs(3720)), "1h 02m");
    }
}
