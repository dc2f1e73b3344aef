//! Bytes as lowercase hex, and back: how the journal's entries and transactions' intent records
//! carry names and paths that may be any bytes.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// `bytes` as lowercase hex.
pub(super) fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of `hex`; none for an odd length or a character that is not a hex digit.
pub(super) fn decode(hex: &[u8]) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.chunks(2).map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()).collect()
}

/// A name that stays in its directory: one non-empty component, never `.` or `..`.
pub(super) fn decode_name(hex: &[u8]) -> Option<OsString> {
    let name = OsString::from_vec(decode(hex)?);
    (!name.is_empty() && name != "." && name != ".." && !name.as_bytes().contains(&b'/')).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_never_leave_their_directory() {
        fn check(hex: &str, expected: Option<&str>) {
            assert_eq!(decode_name(hex.as_bytes()), expected.map(OsString::from), "{hex}");
        }
        check(&encode(b"a.t"), Some("a.t"));
        check("612e74", Some("a.t"));
        for bad in ["2f", "2e2e", "2e", "", "6", "zz"] {
            check(bad, None);
        }
    }
}
