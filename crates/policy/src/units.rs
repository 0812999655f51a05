//! Sizes as people write them in options and config files: `4096`, `512M`, `1G`, `2GiB`.

/// Parses a byte count with an optional binary suffix (K, M, G, T, or KiB, MiB, GiB, TiB).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size: use bytes or K/M/G/T (e.g. 512M)"))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "k" | "KiB" => 10,
        "M" | "m" | "MiB" => 20,
        "G" | "g" | "GiB" => 30,
        "T" | "t" | "TiB" => 40,
        other => return Err(format!("unknown size unit {other:?}: use K, M, G or T")),
    };
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// The shortest exact form `parse_size` reads back: 1073741824 → "1G", 1536 → "1536".
pub fn format_size(bytes: u64) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_trip() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3Q").is_err());
        assert!(parse_size("99999999999T").is_err());
        for bytes in [0, 1536, 1 << 30, 3 << 20, 5 << 40] {
            assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }
        assert_eq!(format_size(1 << 30), "1G");
    }
}
