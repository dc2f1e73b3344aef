//! Rule files for unattended approval: `[[rule]]` entries with a mode (or `*`), a path glob and
//! a decision. Every operation's path (and a move's destination) must be allowed by the first
//! rule that matches it; anything unmatched is denied.

use std::path::Path;

use serde::Deserialize;

use crate::ApproverError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Deny,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub mode: String,
    pub path: String,
    pub decision: Decision,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    #[serde(default)]
    pub rule: Vec<Rule>,
}

impl Rules {
    pub fn load(path: &Path) -> Result<Rules, ApproverError> {
        let text = std::fs::read_to_string(path).map_err(|e| ApproverError::Io(path.to_owned(), e))?;
        toml::from_str(&text).map_err(|e| ApproverError::Rules(path.to_owned(), e))
    }
}

/// `**` any run of characters, `*` any run without `/`, `?` one character other than `/`.
pub use fsd_proto::glob::matches as glob;

/// Decides a daemon description (`mode: …`, `op N: <op> <path>`, `  destination: <path>`).
pub fn decide(rules: &Rules, description: &str) -> Decision {
    explain(rules, description).0
}

/// The operations that change content, which an approval must bind (`content-sha256:`).
const CHANGES_CONTENT: &[&str] = &["writeText", "editText"];

/// The decision and why: the first path no rule allows, or which rule refused it. A write or
/// an edit whose content the description does not bind is refused whatever the rules say: no
/// rule can know what it would approve (the daemon never sends one; this is the second wall).
pub fn explain(rules: &Rules, description: &str) -> (Decision, String) {
    let mode = description.lines().find_map(|l| l.strip_prefix("mode: ")).unwrap_or("");
    let mut paths = Vec::new();
    for line in description.lines() {
        if let Some(rest) = line.strip_prefix("op ") {
            // "N: writeText /path"
            if let Some(path) = rest.split_once(": ").and_then(|(_, op)| op.split_once(' ')).map(|(_, p)| p) {
                paths.push(path.to_owned());
            }
        } else if let Some(path) = line.strip_prefix("  destination: ") {
            paths.push(path.to_owned());
        }
    }
    if mode.is_empty() || paths.is_empty() {
        return (Decision::Deny, "the description names no mode or no path".to_owned());
    }
    if let Some(n) = unbound(description).first() {
        return (Decision::Deny, format!("operation {n} does not bind its content: a person must decide"));
    }
    // Reasons name the operation's number, not its path: the daemon's resolved paths are the
    // approver's to see, and a reason travels back to the client.
    let mut used = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        match first_match(rules, mode, path) {
            Some((n, r)) if r.decision == Decision::Allow => used.push(format!("rule {}", n + 1)),
            Some((n, _)) => {
                return (Decision::Deny, format!("rule {} denies path {} at {mode}", n + 1, i + 1));
            }
            None => return (Decision::Deny, format!("no rule allows path {} at {mode}", i + 1)),
        }
    }
    used.dedup();
    (Decision::Allow, used.join(", "))
}

/// The numbers of the operations that change content without binding it (a write or an edit
/// with no `content-sha256:`): approving one would let any content be written.
pub fn unbound(description: &str) -> Vec<usize> {
    // Per operation: whether it changes content, whether the content is bound.
    let mut ops: Vec<(bool, bool)> = Vec::new();
    for line in description.lines() {
        if let Some((_, op)) = line.strip_prefix("op ").and_then(|rest| rest.split_once(": ")) {
            let name = op.split_once(' ').map_or(op, |(name, _)| name);
            ops.push((CHANGES_CONTENT.contains(&name), false));
        } else if line.starts_with("  content-sha256: ")
            && let Some(last) = ops.last_mut()
        {
            last.1 = true;
        }
    }
    ops.iter().enumerate().filter(|(_, (changes, bound))| *changes && !bound).map(|(i, _)| i + 1).collect()
}

/// The path as the daemon acts on it, which rules are written against: each component's
/// escapes (`\\`, `\xNN`, `\u{…}`, in a request path and in a description alike) read as the
/// daemon reads them, empty and `.` components dropped. `None` (judged by no rule, so refused)
/// for what a glob cannot place: a `..`, which the daemon resolves after links, an escaped
/// separator, a bad escape.
fn acted_on(path: &str) -> Option<String> {
    let mut out = String::with_capacity(path.len());
    for component in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        let raw = fsd_proto::names::unescape(component, true).ok()?;
        if raw == b".." || raw.contains(&b'/') || raw.contains(&0) {
            return None;
        }
        if raw != b"." {
            out.push('/');
            out.push_str(&String::from_utf8_lossy(&raw));
        }
    }
    if out.is_empty() || (path.ends_with('/') && path.len() > 1) {
        out.push('/');
    }
    Some(out)
}

fn first_match<'r>(rules: &'r Rules, mode: &str, path: &str) -> Option<(usize, &'r Rule)> {
    let path = acted_on(path)?;
    rules.rule.iter().enumerate().find(|(_, r)| (r.mode == "*" || r.mode == mode) && glob(&r.path, &path))
}

/// Whether every path (at least one) is allowed at `mode` by the first rule that matches it.
pub fn allows(rules: &Rules, mode: &str, paths: &[String]) -> bool {
    !paths.is_empty()
        && paths
            .iter()
            .all(|path| first_match(rules, mode, path).is_some_and(|(_, r)| r.decision == Decision::Allow))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules {
            rule: vec![
                Rule { mode: "*".into(), path: "/srv/secret/**".into(), decision: Decision::Deny },
                Rule { mode: "danger-full-access".into(), path: "/srv/**".into(), decision: Decision::Allow },
            ],
        }
    }

    fn description(mode: &str, ops: &[&str]) -> String {
        let mut text = format!("fsd escalation v1\nid: x\nmode: {mode}\n");
        for (i, op) in ops.iter().enumerate() {
            text.push_str(&format!("op {}: {op}\n  target: host:x\n  content-sha256: 00\n", i + 1));
        }
        text
    }

    #[test]
    fn every_path_must_be_allowed_by_its_first_matching_rule() {
        let check = |mode: &str, ops: &[&str], want: Decision| {
            assert_eq!(decide(&rules(), &description(mode, ops)), want, "{mode} {ops:?}");
        };
        check("danger-full-access", &["writeText /srv/a.txt"], Decision::Allow);
        check("danger-full-access", &["writeText /srv/a.txt", "deleteFile /srv/secret/k"], Decision::Deny);
        check("workspace-write", &["writeText /srv/a.txt"], Decision::Deny);
        check("danger-full-access", &["writeText /etc/passwd"], Decision::Deny);
        check("danger-full-access", &[], Decision::Deny);
        let moved = "fsd escalation v1\nmode: danger-full-access\nop 1: moveFile /srv/a\n  destination: /etc/b\n  destination-target: host:etc/b\n";
        assert_eq!(decide(&rules(), moved), Decision::Deny);
    }

    /// A destination's name may hold " (": the whole line is its path, so a rule on how a name
    /// ends judges the name it is, not a piece of it.
    #[test]
    fn a_destination_is_judged_whole_whatever_its_name_holds() {
        let rules = Rules {
            rule: vec![
                Rule { mode: "*".into(), path: "/srv/**.key".into(), decision: Decision::Deny },
                Rule { mode: "*".into(), path: "/srv/**".into(), decision: Decision::Allow },
            ],
        };
        let check = |destination: &str, want: Decision| {
            let moved = format!(
                "fsd escalation v1\nmode: danger-full-access\nop 1: moveFile /srv/a\n  target: host:srv/a\n  destination: {destination}\n  destination-target: host:{}\n",
                &destination[1..]
            );
            assert_eq!(decide(&rules, &moved), want, "{destination}");
        };
        check("/srv/b.txt", Decision::Allow);
        check("/srv/b.key", Decision::Deny);
        check("/srv/a (b.key", Decision::Deny);
        check("/srv/x (y) (z.key", Decision::Deny);
    }

    #[test]
    fn the_reason_names_the_rule_or_the_unmatched_path() {
        let check = |ops: &[&str], want: (Decision, &str)| {
            let got = explain(&rules(), &description("danger-full-access", ops));
            assert_eq!((got.0, got.1.as_str()), want, "{ops:?}");
        };
        check(&["writeText /srv/a"], (Decision::Allow, "rule 2"));
        check(
            &["writeText /srv/a", "deleteFile /srv/secret/k"],
            (Decision::Deny, "rule 1 denies path 2 at danger-full-access"),
        );
        check(&["writeText /etc/x"], (Decision::Deny, "no rule allows path 1 at danger-full-access"));
        check(&[], (Decision::Deny, "the description names no mode or no path"));
    }

    #[test]
    fn no_rule_approves_a_change_whose_content_is_not_bound() {
        let allow_all =
            Rules { rule: vec![Rule { mode: "*".into(), path: "/**".into(), decision: Decision::Allow }] };
        let check = |description: &str, want: (Decision, &str)| {
            let got = explain(&allow_all, description);
            assert_eq!((got.0, got.1.as_str()), want, "{description}");
        };
        let head = "fsd escalation v1\nmode: danger-full-access\n";
        let bound = "  target: host:x\n  current: absent\n  content-sha256: 00ff\n";
        let unbound = "  target: host:x\n  current: absent\n";
        check(&format!("{head}op 1: writeText /srv/a\n{bound}"), (Decision::Allow, "rule 1"));
        check(
            &format!("{head}op 1: writeText /srv/a\n{bound}op 2: editText /srv/b\n{unbound}"),
            (Decision::Deny, "operation 2 does not bind its content: a person must decide"),
        );
        check(
            &format!("{head}op 1: writeText /srv/a\n{unbound}"),
            (Decision::Deny, "operation 1 does not bind its content: a person must decide"),
        );
        // Reads, deletes and moves without new content have no content to bind.
        check(&format!("{head}op 1: readText /srv/a\n{unbound}"), (Decision::Allow, "rule 1"));
        check(&format!("{head}op 1: deleteFile /srv/a\n{unbound}"), (Decision::Allow, "rule 1"));
    }

    #[test]
    fn rules_judge_the_path_the_daemon_acts_on() {
        let rules = Rules {
            rule: vec![
                Rule { mode: "*".into(), path: "/srv/données/**".into(), decision: Decision::Deny },
                Rule { mode: "*".into(), path: "/srv/secret/**".into(), decision: Decision::Deny },
                Rule { mode: "*".into(), path: "/srv/**".into(), decision: Decision::Allow },
            ],
        };
        let check = |path: &str, want: bool| {
            assert_eq!(allows(&rules, "danger-full-access", &[path.to_owned()]), want, "{path}");
            let described = format!(
                "fsd escalation v1\nmode: danger-full-access\nop 1: writeText {path}\n  content-sha256: 00\n"
            );
            let want = if want { Decision::Allow } else { Decision::Deny };
            assert_eq!(decide(&rules, &described), want, "{path}");
        };
        check("/srv/a.txt", true);
        check("/srv//./a.txt", true);
        check("/srv/secret/k", false);
        // A description shows non-ASCII escaped; a request path may use the daemon's escapes.
        check(r"/srv/donn\u{e9}es/k", false);
        check("/srv/données/k", false);
        check(r"/srv/\x73ecret/k", false);
        check("/srv/./secret/k", false);
        check(r"/srv/\x2e/secret/k", false);
        // `..` is resolved by the daemon after links: no glob can place it.
        check("/srv/a/../secret/k", false);
        check(r"/srv/\x2e\x2e/etc/passwd", false);
        check(r"/srv/a\x2fb", false);
    }

    #[test]
    fn globs() {
        assert!(glob("/srv/**", "/srv/a/b"));
        assert!(!glob("/srv/*", "/srv/a/b"));
        assert!(glob("/srv/?.txt", "/srv/a.txt"));
    }
}
