//! The one path glob of the project: the approver's rule files and the daemon's `read_denied`
//! patterns match paths with it, so a pattern means the same wherever an operator writes one.

/// Whether `path` matches `pattern`: `**` any run of characters, `*` any run without `/`, `?`
/// one character other than `/`; everything else stands for itself.
pub fn matches(pattern: &str, path: &str) -> bool {
    fn go(p: &[char], s: &[char]) -> bool {
        match p {
            [] => s.is_empty(),
            ['*', '*', rest @ ..] => (0..=s.len()).any(|i| go(rest, &s[i..])),
            ['*', rest @ ..] => {
                (0..=s.len()).take_while(|&i| i == 0 || s[i - 1] != '/').any(|i| go(rest, &s[i..]))
            }
            ['?', rest @ ..] => s.first().is_some_and(|&c| c != '/') && go(rest, &s[1..]),
            [c, rest @ ..] => s.first() == Some(c) && go(rest, &s[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = path.chars().collect();
    go(&p, &s)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs() {
        for (pattern, path, want) in [
            ("/srv/**", "/srv/a/b", true),
            ("/srv/*", "/srv/a/b", false),
            ("/srv/?.txt", "/srv/a.txt", true),
            ("**/.env", "/ws/.env", true),
            ("**/.env", "/ws/a/.env", true),
            ("**/.env", "/ws/.env.example", false),
            ("**/.env", "/ws/x.env", false),
            ("**/*.key", "/ws/tls/server.key", true),
            ("**/id_*", "/home/u/.ssh/id_rsa", true),
            ("**/id_*", "/home/u/.ssh/known_hosts", false),
        ] {
            assert_eq!(matches(pattern, path), want, "{pattern} {path}");
        }
    }
}
