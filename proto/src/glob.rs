//! The one path glob of the project: the approver's rule files and the daemon's `read_denied`
//! patterns match paths with it, so a pattern means the same wherever an operator writes one.

/// Whether `path` matches `pattern`: `**` any run of characters, `*` any run without `/`, `?`
/// one character other than `/`; everything else stands for itself.
pub fn matches(pattern: &str, path: &str) -> bool {
    Glob::new(pattern).matches(path)
}

/// A pattern made ready once for many paths: the daemon asks every path a call resolves (and
/// each directory above it), so matching allocates nothing, and a `**/` followed by a tail
/// without another `**` (every pattern of the defaults) looks only at the path's last
/// components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    /// For `**/tail`, the tail free of `**`: how many `/` it holds. Its wildcards cannot cross
    /// a `/`, so it can only match from the slash that leaves as many after it.
    tail_slashes: Option<usize>,
}

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        let tail_slashes = pattern
            .strip_prefix("**")
            .filter(|tail| tail.starts_with('/') && !tail.contains("**"))
            .map(|tail| tail.bytes().filter(|&b| b == b'/').count());
        Glob { pattern: pattern.to_owned(), tail_slashes }
    }

    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    pub fn matches(&self, path: &str) -> bool {
        let (p, s) = (self.pattern.as_bytes(), path.as_bytes());
        let Some(slashes) = self.tail_slashes else { return go(p, s) };
        let mut seen = 0;
        for (i, &b) in s.iter().enumerate().rev() {
            if b == b'/' {
                seen += 1;
                if seen == slashes {
                    return go(&p[2..], &s[i..]);
                }
            }
        }
        false
    }
}

/// Byte-wise: a literal of the pattern is whole characters, so it can only match at a
/// character boundary; only `?` needs to know how long a character is.
fn go(p: &[u8], s: &[u8]) -> bool {
    match p {
        [] => s.is_empty(),
        [b'*', b'*', rest @ ..] => (0..=s.len()).any(|i| go(rest, &s[i..])),
        [b'*', rest @ ..] => {
            (0..=s.len()).take_while(|&i| i == 0 || s[i - 1] != b'/').any(|i| go(rest, &s[i..]))
        }
        [b'?', rest @ ..] => match s.first() {
            // Inside a character (a `*` stopped mid-way): not where a character starts.
            Some(0x80..=0xbf) => false,
            Some(&c) if c != b'/' => {
                let width = match c {
                    0xf0.. => 4,
                    0xe0.. => 3,
                    0xc0.. => 2,
                    _ => 1,
                };
                s.len() >= width && go(rest, &s[width..])
            }
            _ => false,
        },
        [c, rest @ ..] => s.first() == Some(c) && go(rest, &s[1..]),
    }
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
            ("**/.env", "/.env", true),
            ("**/.env", "/ws/.env/x", false),
            ("**/.aws/credentials", "/home/u/.aws/credentials", true),
            ("**/.aws/credentials", "/home/u/aws/credentials", false),
            ("**/.env.*.local", "/ws/.env.prod.local", true),
            ("**/.env.*.local", "/ws/.env.a/b.local", false),
            ("/srv/**/x", "/srv/a/b/x", true),
            ("/srv/**/x", "/srv/x", false),
            ("**/a/**/b", "/q/a/r/s/b", true),
            ("/srv/?.txt", "/srv/é.txt", true),
            ("/srv/??.txt", "/srv/é.txt", false),
            ("/srv/*.txt", "/srv/données.txt", true),
            ("/*??", "/€", false),
            ("/*?", "/€", true),
        ] {
            assert_eq!(matches(pattern, path), want, "{pattern} {path}");
        }
    }
}
