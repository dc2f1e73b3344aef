//! The client-side approver for `escalation = "client"` daemons: a rule file for unattended use
//! (first matching rule wins; no match denies), or a prompt: on the controlling terminal, or,
//! inside an MCP host, through the host's elicitation. At this
//! trust level the daemon believes the client, so this is a guard against a model's mistakes,
//! not against a compromised client.

use std::io::{BufRead, Write};
use std::path::Path;

use fsd_approver::Rules;
// What could disguise a path or reason in the prompt is escaped by the one escaper of
// person-facing text, shared with the daemon's description and `fsd-approver`'s terminal.
use fsd_proto::names::for_people as escape;

/// Who approves a wider mode.
#[derive(Debug, Clone)]
pub enum Approver {
    /// Nobody: every escalation is refused.
    None,
    Rules(Rules),
    /// Ask on /dev/tty.
    Prompt,
}

/// An unreadable or invalid rule file.
pub type ApproverError = fsd_approver::ApproverError;

/// Who refused an escalation, for the model's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBy {
    /// The daemon's approver's rule file (signed trust).
    ApproverRules,
    /// The person at the daemon's approver (signed trust).
    ApproverPerson,
    /// Nobody decided: the daemon's approver could not be reached.
    Unreachable,
    /// This client's rule file.
    ClientRules,
    /// The user, asked by this client (terminal or MCP host).
    User,
    /// This client has no approver configured.
    NoApprover,
    /// The MCP host cannot ask the user (no elicitation support).
    NoElicitation,
    /// A prompt was configured, but there is no terminal to ask on.
    NoOne,
}

/// Whether this process has a controlling terminal to prompt on.
pub fn terminal_available() -> bool {
    std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty").is_ok()
}

/// What a person said through the tool's host (an MCP client's elicitation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostAnswer {
    Approved,
    Refused(String),
    /// The host cannot ask (no elicitation capability).
    Unsupported,
}

/// A person reached through the host the tools run in, for hosts without a terminal.
pub trait Host: Send + Sync + std::fmt::Debug {
    fn ask(
        &self,
        message: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = HostAnswer> + Send + '_>>;

    /// Sends the person to a page (an MCP host's URL-mode elicitation) without waiting for
    /// them: the elicitation's id, when the host can. The page decides, not the host's answer.
    fn send_to(&self, _url: String, _message: String) -> Option<String> {
        None
    }

    /// Tells the host that what the page was for is over (the decision came).
    fn sent_done(&self, _id: String) {}
}

/// The approver page's address for the escalation this call asks: `/r/CALL`, the page of the one
/// request whose description names this call id (the daemon's id and digest do not exist yet
/// when the link leaves). It carries no authority (the person logs in on the page), so a host
/// that follows it cannot approve anything by doing so.
pub fn page_url(base: &str, call: &str) -> String {
    // Everything but the unreserved characters of RFC 3986 is encoded.
    const SEGMENT: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    let call = percent_encoding::utf8_percent_encode(call, SEGMENT);
    format!("{}/r/{call}", base.trim_end_matches('/'))
}

/// What the host shows beside the page's link: the tool, the mode and the paths, escaped.
pub fn page_message(tool: &str, mode: &str, paths: &[String]) -> String {
    let paths: Vec<String> = paths.iter().map(|p| escape(p)).collect();
    format!(
        "The agent asks to run {} at {} mode on {}. Approve or deny it on the approver's page (log in there).",
        escape(tool),
        escape(mode),
        paths.join(", ")
    )
}

/// What a person is shown: the tool, the mode, every path as the daemon will act on it (the
/// model's spelling beside it only where that differs) and the model's reason, escaped.
pub fn message(ask: &Ask<'_>) -> String {
    let mut text = format!("The agent asks to run {} at {} mode.\n", escape(ask.tool), escape(ask.mode));
    for (i, path) in ask.paths.iter().enumerate() {
        match ask.requested.get(i).filter(|requested| *requested != path) {
            Some(requested) => {
                text.push_str(&format!("  path: {} (requested as {})\n", escape(path), escape(requested)))
            }
            None => text.push_str(&format!("  path: {}\n", escape(path))),
        }
    }
    text.push_str(&format!("  reason: {}\n", reason(ask.justification)));
    text.push_str("Approve this one call?");
    text
}

/// What the client's approver decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approved,
    Refused { by: RefusedBy, reason: String },
}

/// One escalation to decide.
#[derive(Debug)]
pub struct Ask<'a> {
    pub tool: &'a str,
    /// Each path (then each destination) as the daemon resolved it: what is shown and judged.
    pub paths: &'a [String],
    /// The same paths as the model wrote them, in the same order.
    pub requested: &'a [String],
    pub mode: &'a str,
    pub justification: &'a str,
}

impl Approver {
    pub fn from_config(rules: Option<&Path>, prompt: bool) -> Result<Approver, ApproverError> {
        match (rules, prompt) {
            (Some(path), _) => Ok(Approver::Rules(Rules::load(path)?)),
            (None, true) => Ok(Approver::Prompt),
            (None, false) => Ok(Approver::None),
        }
    }

    /// Whether `ask` is approved. Every path must be allowed.
    pub fn decide(&self, ask: &Ask<'_>) -> bool {
        self.verdict(ask) == Verdict::Approved
    }

    /// The decision on `ask`, with who refused it.
    pub fn verdict(&self, ask: &Ask<'_>) -> Verdict {
        let refused = |by| Verdict::Refused { by, reason: String::new() };
        match self {
            Approver::None => refused(RefusedBy::NoApprover),
            Approver::Rules(rules) if fsd_approver::allows(rules, ask.mode, ask.paths) => Verdict::Approved,
            Approver::Rules(_) => refused(RefusedBy::ClientRules),
            Approver::Prompt => match prompt(ask) {
                Ok(true) => Verdict::Approved,
                Ok(false) => refused(RefusedBy::User),
                Err(_) => refused(RefusedBy::NoOne),
            },
        }
    }
}

/// Characters of the model's reason shown; the rest is said to be there, not shown.
const MAX_REASON_CHARS: usize = 1000;

/// The model's reason as shown: escaped, cut at [`MAX_REASON_CHARS`], the cut said.
fn reason(text: &str) -> String {
    let mut shown = String::new();
    let mut chars = 0;
    for (at, c) in text.char_indices() {
        let escaped = escape(c.encode_utf8(&mut [0; 4]));
        chars += escaped.chars().count();
        if chars > MAX_REASON_CHARS {
            return format!("{shown} [{} more bytes of the reason not shown]", text.len() - at);
        }
        shown.push_str(&escaped);
    }
    shown
}

fn prompt(ask: &Ask<'_>) -> std::io::Result<bool> {
    let tty = std::fs::OpenOptions::new().read(true).write(true).open("/dev/tty")?;
    let mut out = &tty;
    writeln!(out, "fsd: {}", message(ask))?;
    write!(out, "[y/N] ")?;
    out.flush()?;
    let mut answer = String::new();
    std::io::BufReader::new(&tty).read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "Yes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_link_names_the_call_and_encodes_it() {
        let cases = [
            ("http://127.0.0.1:8443/", "s-12-34-5", "http://127.0.0.1:8443/r/s-12-34-5"),
            ("https://approvals.example.org", "s-1-2-3", "https://approvals.example.org/r/s-1-2-3"),
            ("https://a.example/", "s x/?#-1", "https://a.example/r/s%20x%2F%3F%23-1"),
        ];
        for (base, call, want) in cases {
            assert_eq!(page_url(base, call), want, "{base} {call}");
        }
    }

    #[test]
    fn first_matching_rule_wins_and_no_match_denies() {
        use fsd_approver::{Decision, Rule};
        let rules = Rules {
            rule: vec![
                Rule { mode: "*".into(), path: "/secret/**".into(), decision: Decision::Deny },
                Rule { mode: "danger-full-access".into(), path: "/**".into(), decision: Decision::Allow },
            ],
        };
        let approver = Approver::Rules(rules);
        let ask = |path: &str, mode: &str| {
            let paths = vec![path.to_owned()];
            approver.decide(&Ask {
                tool: "write",
                paths: &paths,
                requested: &paths,
                mode,
                justification: "why",
            })
        };
        assert!(ask("/tmp/x", "danger-full-access"));
        assert!(!ask("/secret/x", "danger-full-access"));
        assert!(!ask("/tmp/x", "workspace-write"));
        let ask = Ask { tool: "write", paths: &[], requested: &[], mode: "x", justification: "" };
        assert!(!Approver::None.decide(&ask));
    }

    /// The person's prompt, whole: the path the daemon will act on, the model's spelling beside
    /// it only where it differs.
    #[test]
    fn the_prompt_shows_the_resolved_path_and_the_requested_one_beside_it() {
        let check = |paths: &[&str], requested: &[&str], want: &str| {
            let paths: Vec<String> = paths.iter().map(|p| (*p).to_owned()).collect();
            let requested: Vec<String> = requested.iter().map(|p| (*p).to_owned()).collect();
            let ask = Ask {
                tool: "write",
                paths: &paths,
                requested: &requested,
                mode: "danger-full-access",
                justification: "the user asked",
            };
            assert_eq!(message(&ask), want);
        };
        check(
            &["/etc/passwd"],
            &[r"/\x65tc/./passwd"],
            "The agent asks to run write at danger-full-access mode.\n  path: /etc/passwd (requested as /\\x65tc/./passwd)\n  reason: the user asked\nApprove this one call?",
        );
        check(
            &["/etc/app.conf"],
            &["/etc/app.conf"],
            "The agent asks to run write at danger-full-access mode.\n  path: /etc/app.conf\n  reason: the user asked\nApprove this one call?",
        );
        check(
            &["/srv/b", "/srv/c"],
            &["/srv/a/../b", "/srv/c"],
            "The agent asks to run write at danger-full-access mode.\n  path: /srv/b (requested as /srv/a/../b)\n  path: /srv/c\n  reason: the user asked\nApprove this one call?",
        );
    }

    /// The prompt a person reads (terminal or MCP host), whole: nothing in the model's reason
    /// or a path restyles, reorders or hides text, and a long reason is cut and says so.
    #[test]
    fn nothing_the_model_wrote_restyles_or_hides_the_prompt() {
        let paths = vec!["/etc/\u{1b}[8mhidden\u{202e}txt.exe".to_owned()];
        let requested = vec!["/etc/x\u{200b}".to_owned()];
        let long = format!("fix\u{1b}[2K\r{}", "a".repeat(1200));
        let ask = |justification| Ask {
            tool: "write",
            paths: &paths,
            requested: &requested,
            mode: "danger-full-access",
            justification,
        };
        assert_eq!(
            message(&ask(&long)),
            format!(
                "The agent asks to run write at danger-full-access mode.\n  path: /etc/\\u{{1b}}[8mhidden\\u{{202e}}txt.exe (requested as /etc/x\\u{{200b}})\n  reason: fix\\u{{1b}}[2K\\u{{d}}{} [217 more bytes of the reason not shown]\nApprove this one call?",
                "a".repeat(1000 - 17)
            )
        );
        assert!(message(&ask("short")).contains("  reason: short\n"));
    }
}
