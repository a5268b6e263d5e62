//! Shell quoting for the commands the harness hands an agent: every path and argument put
//! into a command must survive being pasted into `sh`, whatever its characters.

/// `s` as one `sh` word: bare when it holds only safe characters, else in single quotes
/// (a `'` inside becomes `'\''`).
pub fn quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:@%+,".contains(c));
    if safe {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn words_survive_sh() {
        for w in [
            "plain/path.md",
            "a b",
            "it's",
            "$HOME `x` \"q\"",
            "",
            "-n\n2",
        ] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", quote(w)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), w);
        }
        assert_eq!(quote("a/b.md"), "a/b.md");
    }
}
