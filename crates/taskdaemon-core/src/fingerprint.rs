//! FNV-1a (64 bit): the one stable, dependency-free fingerprint the harness keeps in files
//! and names (a tool-call signature in `run.json`, a lock's or socket's name made from a
//! path). Stable across versions: what it names on disk must stay found.

/// FNV-1a's starting value (its "offset basis").
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// `h` carried on over `bytes`.
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The fingerprint of `bytes` from the start, as 16 hex digits.
pub fn fnv1a_hex(bytes: &[u8]) -> String {
    format!("{:016x}", fnv1a(FNV_OFFSET, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_fnv1a_64_values() {
        // From the FNV reference test vectors.
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_hex(b"foobar"), "85944171f73967e8");
        assert_eq!(
            fnv1a(fnv1a(FNV_OFFSET, b"foo"), b"bar"),
            fnv1a(FNV_OFFSET, b"foobar")
        );
    }
}
