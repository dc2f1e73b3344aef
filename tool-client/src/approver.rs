//! The client-side approver for `escalation = "client"` daemons: a rule file for unattended use
//! (first matching rule wins; no match denies), or a prompt on the controlling terminal. At this
//! trust level the daemon believes the client, so this is a guard against a model's mistakes,
//! not against a compromised client.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One rule: a mode (or `*`) and a path glob (`*` within a component, `**` across).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub mode: String,
    pub path: String,
    pub decision: Decision,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    rule: Vec<Rule>,
}

/// Who approves a wider mode.
#[derive(Debug, Clone)]
pub enum Approver {
    /// Nobody: every escalation is refused.
    None,
    Rules(Vec<Rule>),
    /// Ask on /dev/tty.
    Prompt,
}

#[derive(Debug, thiserror::Error)]
pub enum ApproverError {
    #[error("cannot read escalation rules {0}: {1}")]
    Read(PathBuf, #[source] std::io::Error),
    #[error("invalid escalation rules {0}: {1}")]
    Parse(PathBuf, #[source] toml::de::Error),
}

/// One escalation to decide.
#[derive(Debug)]
pub struct Ask<'a> {
    pub tool: &'a str,
    pub paths: &'a [String],
    pub mode: &'a str,
    pub justification: &'a str,
}

impl Approver {
    pub fn from_config(rules: Option<&Path>, prompt: bool) -> Result<Approver, ApproverError> {
        match (rules, prompt) {
            (Some(path), _) => {
                let text = std::fs::read_to_string(path).map_err(|e| ApproverError::Read(path.to_owned(), e))?;
                let file: RuleFile = toml::from_str(&text).map_err(|e| ApproverError::Parse(path.to_owned(), e))?;
                Ok(Approver::Rules(file.rule))
            }
            (None, true) => Ok(Approver::Prompt),
            (None, false) => Ok(Approver::None),
        }
    }

    /// Whether `ask` is approved. Every path must be allowed.
    pub fn decide(&self, ask: &Ask<'_>) -> bool {
        match self {
            Approver::None => false,
            Approver::Rules(rules) => ask.paths.iter().all(|path| {
                rules
                    .iter()
                    .find(|r| (r.mode == "*" || r.mode == ask.mode) && glob(&r.path, path))
                    .is_some_and(|r| r.decision == Decision::Allow)
            }),
            Approver::Prompt => prompt(ask).unwrap_or(false),
        }
    }
}

/// Escapes control, bidi and other non-printing characters so a path cannot disguise itself.
pub fn escape(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn prompt(ask: &Ask<'_>) -> std::io::Result<bool> {
    let tty = std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty")?;
    let mut out = &tty;
    writeln!(out, "fsd: {} asks for {} mode", escape(ask.tool), escape(ask.mode))?;
    for path in ask.paths {
        writeln!(out, "  path: {}", escape(path))?;
    }
    writeln!(out, "  reason: {}", escape(ask.justification))?;
    write!(out, "Allow this one call? [y/N] ")?;
    out.flush()?;
    let mut answer = String::new();
    std::io::BufReader::new(&tty).read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes"))
}

/// Matches a path against a glob: `**` any run of characters, `*` any run without `/`, `?` one
/// character other than `/`.
pub fn glob(pattern: &str, path: &str) -> bool {
    fn go(p: &[char], s: &[char]) -> bool {
        match p {
            [] => s.is_empty(),
            ['*', '*', rest @ ..] => (0..=s.len()).any(|i| go(rest, &s[i..])),
            ['*', rest @ ..] => (0..=s.len()).take_while(|&i| i == 0 || s[i - 1] != '/').any(|i| go(rest, &s[i..])),
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
    use super::*;

    #[test]
    fn globs() {
        let check = |p: &str, s: &str, want: bool| assert_eq!(glob(p, s), want, "{p} vs {s}");
        check("/etc/hosts", "/etc/hosts", true);
        check("/etc/*", "/etc/hosts", true);
        check("/etc/*", "/etc/ssh/config", false);
        check("/etc/**", "/etc/ssh/config", true);
        check("/tmp/**/x.txt", "/tmp/a/b/x.txt", true);
        check("/tmp/?.txt", "/tmp/a.txt", true);
        check("/tmp/?.txt", "/tmp/ab.txt", false);
    }

    #[test]
    fn first_matching_rule_wins_and_no_match_denies() {
        let rules = vec![
            Rule { mode: "*".into(), path: "/secret/**".into(), decision: Decision::Deny },
            Rule { mode: "danger-full-access".into(), path: "/**".into(), decision: Decision::Allow },
        ];
        let approver = Approver::Rules(rules);
        let ask = |path: &str, mode: &str| {
            let paths = vec![path.to_owned()];
            approver.decide(&Ask { tool: "write", paths: &paths, mode, justification: "why" })
        };
        assert!(ask("/tmp/x", "danger-full-access"));
        assert!(!ask("/secret/x", "danger-full-access"));
        assert!(!ask("/tmp/x", "workspace-write"));
        assert!(!Approver::None.decide(&Ask { tool: "write", paths: &[], mode: "x", justification: "" }));
    }

    #[test]
    fn escaping_disarms_bidi_and_control_characters() {
        assert_eq!(escape("a\u{202e}txt.exe"), "a\\u{202e}txt.exe");
        assert_eq!(escape("line\nbreak"), "line\\u{a}break");
        assert_eq!(escape("café"), "café");
    }
}
