//! The model-facing tools: which are visible, their schemas and guidance, and a session that runs
//! them against one daemon with its own observations.

mod args;
mod edit;
mod editor;
mod escalation_fields;
mod image;
mod patch;
mod read;
mod record_tools;
mod schema;
#[cfg(test)]
mod texts;
mod tool;
mod write;

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use fsd_policy::{EditRefusal, Observations, TargetKey, Version};
use serde_json::{Map, Value, json};

use crate::config::ClientConfig;
use crate::daemon::{Daemon, Hello, Mode, Target, TextChange, VersionGuard, WriteGuard};
use crate::failure::ToolError;
use crate::local_approver::Approver;

pub use schema::guidance_for;
pub use tool::Tool;

/// One block of a tool result.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    Image { mime_type: String, data: Vec<u8> },
}

/// A finished tool call: what the model reads, and what callers branch on.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub is_error: bool,
    pub code: Option<String>,
    pub content: Vec<Block>,
    pub meta: Map<String, Value>,
}

impl ToolResult {
    pub fn text_ok(text: String, meta: Map<String, Value>) -> ToolResult {
        ToolResult { is_error: false, code: None, content: vec![Block::Text(text)], meta }
    }

    pub fn error(error: ToolError) -> ToolResult {
        ToolResult {
            is_error: true,
            code: Some(error.code.clone()),
            content: vec![Block::Text(error.text())],
            meta: Map::new(),
        }
    }

    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.as_str()),
                Block::Image { .. } => None,
            })
            .collect()
    }
}

/// The tool set a configuration makes visible.
#[derive(Debug, Clone)]
pub struct Tools {
    config: ClientConfig,
    /// The mutating tools carry the escalation fields (set from the daemon's hello).
    escalation: bool,
}

impl Tools {
    pub fn new(config: ClientConfig) -> Tools {
        Tools { config, escalation: false }
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The visible tools, in schema order.
    pub fn visible_tools(&self) -> Vec<Tool> {
        Tool::ALL.into_iter().filter(|tool| self.turned_on_by(*tool).is_none()).collect()
    }

    /// For a tool this composition leaves off, the client config setting that turns it on
    /// (None: the tool is on).
    pub fn turned_on_by(&self, tool: Tool) -> Option<&'static str> {
        let c = &self.config;
        match tool {
            Tool::Read => (!c.read).then_some("read = true"),
            // read_image needs durable storage for its blocks: without a store it is not offered.
            Tool::ReadImage => match (c.read_image, c.attachment_store.is_some()) {
                (true, true) => None,
                (true, false) => Some("attachmentStore = \"DIR\""),
                (false, true) => Some("readImage = true"),
                (false, false) => Some("readImage = true with attachmentStore = \"DIR\""),
            },
            Tool::Write => (!c.write).then_some("write = true"),
            Tool::Edit => (!c.edit).then_some("edit = true"),
            Tool::ApplyPatch => (!c.apply_patch).then_some("applyPatch = true"),
            Tool::StrReplaceEditor => (!c.str_replace_editor).then_some("strReplaceEditor = true"),
            // The change record's tools: one key for the three (docs/rewind.md).
            Tool::Checkpoint | Tool::Changes | Tool::Rewind => {
                (!c.change_tools).then_some("changeTools = true")
            }
        }
    }

    /// The refusal of a call to a tool that is not offered: an unknown name, or a tool that is
    /// off, with the one setting that turns it on.
    pub fn not_offered(&self, name: &str) -> String {
        match Tool::parse(name).and_then(|tool| self.turned_on_by(tool)) {
            Some(setting) => format!(
                "tool \"{name}\" is off in this client; {setting} in the client config (--config FILE) turns it on"
            ),
            None => format!("unknown tool \"{name}\""),
        }
    }

    /// Visible tool names, in schema order.
    pub fn visible(&self) -> Vec<&'static str> {
        self.visible_tools().into_iter().map(Tool::name).collect()
    }

    /// The JSON schemas of the visible tools: `[{name, description, input_schema}]`.
    pub fn schemas(&self) -> Vec<Value> {
        self.visible_tools()
            .into_iter()
            .map(|tool| {
                let mut schema = schema::schema_for(tool, &self.config);
                // read carries the fields too: an approved read lets an approved edit follow.
                if self.escalation && tool.takes_escalation() {
                    escalation_fields::extend_schema(&mut schema);
                }
                schema
            })
            .collect()
    }

    /// The guidance paragraphs of the visible tools, joined by blank lines.
    pub fn guidance(&self) -> String {
        guidance_for(&self.visible_tools(), self.config.apply_patch_atomic)
    }
}

/// A session: one owner of observations, one working directory, one daemon connection.
#[derive(Debug)]
pub struct Session {
    tools: Tools,
    daemon: Daemon,
    hello: Hello,
    cwd: PathBuf,
    observations: Observations,
    /// What each absolute path the session used resolved to, so the policy can name targets
    /// without a round trip. A stale entry is harmless: the daemon re-checks key and version.
    keys: HashMap<String, TargetKey>,
    /// Set while the daemon accepts client-approved escalation to a wider mode.
    escalation: Option<escalation_fields::Offer>,
    approver: Approver,
    /// The call in progress asked for a wider mode: its refusals carry no retry hint.
    escalation_asked: bool,
    /// Where a prompt goes when there is no terminal (the MCP client, by elicitation).
    host: Option<std::sync::Arc<dyn crate::local_approver::Host>>,
}

/// Whether an escalation could reach anyone who decides: the daemon's approver (`signed`), this
/// client's rule file, or a person (`escalationPrompt`) on the controlling terminal or through
/// the host (`host_asks`).
fn someone_to_ask(hello: &Hello, approver: &Approver, host_asks: bool) -> bool {
    match approver {
        _ if hello.escalation == "signed" => true,
        Approver::Rules(_) => true,
        Approver::Prompt => host_asks || crate::local_approver::terminal_available(),
        Approver::None => false,
    }
}

impl Session {
    pub fn new(
        mut tools: Tools,
        client: impl Into<crate::connect::SessionClient>,
        hello: impl Into<Hello>,
        cwd: PathBuf,
    ) -> Session {
        let hello = hello.into();
        let session_id = format!("s-{}-{}", std::process::id(), unique_suffix());
        let offer = escalation_fields::Offer::from_hello(&hello);
        let config = &tools.config;
        let approver =
            match Approver::from_config(config.escalation_rules.as_deref(), config.escalation_prompt) {
                Ok(approver) => approver,
                Err(e) => {
                    // ClientConfig::load already checked the file; it changed since.
                    tracing::error!(error = %e, "escalation rules unreadable; refusing every escalation");
                    Approver::None
                }
            };
        // Where no one can be asked, the fields are not advertised: a call that used them could
        // only be refused.
        tools.escalation = offer.is_some() && someone_to_ask(&hello, &approver, false);
        Session {
            tools,
            daemon: Daemon::new(client.into(), session_id),
            hello,
            cwd,
            observations: Observations::new(),
            keys: HashMap::new(),
            escalation: offer,
            approver,
            escalation_asked: false,
            host: None,
        }
    }

    pub fn tools(&self) -> &Tools {
        &self.tools
    }

    /// The session's daemon, for the calls that are no tool's (the change record's, `changes`).
    pub fn daemon(&mut self) -> &mut Daemon {
        &mut self.daemon
    }

    pub fn hello(&self) -> &Hello {
        &self.hello
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// Changes the working directory for later calls; roots and permissions do not change.
    pub fn set_cwd(&mut self, cwd: PathBuf) -> Result<(), ToolError> {
        if !cwd.is_absolute() {
            return Err(ToolError::invalid_args("cwd must be an absolute path"));
        }
        self.cwd = cwd;
        Ok(())
    }

    /// Runs a tool by name with JSON arguments.
    pub async fn call(&mut self, name: &str, args: Value) -> ToolResult {
        let Some(tool) = Tool::parse(name).filter(|t| self.tools.visible_tools().contains(t)) else {
            return ToolResult::error(ToolError::new("UNKNOWN_TOOL", self.tools.not_offered(name)));
        };
        self.daemon.begin_call();
        self.escalation_asked = false;
        // Its daemon calls name the tool (for the daemon's trace spans).
        let outcome = crate::connect::trace::tool(tool.name(), async {
            match tool {
                Tool::Read => read::run(self, &args).await,
                Tool::Write => write::run(self, &args).await,
                Tool::Edit => edit::run(self, &args).await,
                Tool::ApplyPatch => patch::run(self, &args).await,
                Tool::ReadImage => image::run(self, &args).await,
                Tool::StrReplaceEditor => editor::run(self, &args).await,
                Tool::Checkpoint => record_tools::checkpoint(self, &args).await,
                Tool::Changes => record_tools::changes(self, &args).await,
                Tool::Rewind => record_tools::rewind(self, &args).await,
            }
        })
        .await;
        // The daemon restarted under the session: this call was refused (or, at worst, read
        // from the new instance); the observations describe files the old instance served.
        if self.daemon.take_restart() {
            self.restarted().await;
            return ToolResult::error(ToolError::restarted());
        }
        // A wider mode applies to one call only; a signed escalation is spent when the call ends.
        self.daemon.end_call().await;
        // The hint offers a retry only where the fields exist (read and the mutations, not an
        // editor view), only for a call that did not just ask, and only the mode it needs.
        let viewing = tool == Tool::StrReplaceEditor && !tool.mutates(&args);
        let writing = tool.may_mutate();
        let path = args
            .get("file_path")
            .or_else(|| args.get("path"))
            .and_then(Value::as_str)
            .map(|p| self.absolute(p));
        outcome.unwrap_or_else(|mut error| {
            let denied = error.code == "FS_SANDBOX_DENIED"
                && tool.takes_escalation()
                && !viewing
                && !self.escalation_asked;
            if let (true, Some(offer)) = (denied, &self.escalation) {
                let needed = match &path {
                    Some(path) => escalation_fields::needed(offer, &self.hello, path, writing),
                    // apply_patch: the mode that covers every path the patch names.
                    None => {
                        let input = args.get("input").and_then(Value::as_str).unwrap_or("");
                        let modes: Vec<Option<Mode>> = patch_paths(input)
                            .map(|p| escalation_fields::needed(offer, &self.hello, &self.absolute(p), true))
                            .collect();
                        modes.iter().copied().max().flatten()
                    }
                };
                if let Some(mode) = needed {
                    error.message.push_str(&escalation_fields::hint(mode));
                }
            }
            ToolResult::error(error)
        })
    }

    /// Starts over against the daemon's new instance: no observation, no learnt target key, and
    /// the new instance's hello (its roots, modes and escalation offer).
    async fn restarted(&mut self) {
        tracing::warn!(session = %self.daemon.session_id(), "the daemon restarted; earlier reads no longer count");
        self.observations = Observations::new();
        self.keys.clear();
        self.daemon.set_call_mode(None);
        match self.daemon.hello().await {
            Ok(hello) => {
                self.escalation = escalation_fields::Offer::from_hello(&hello);
                self.tools.escalation =
                    self.escalation.is_some() && someone_to_ask(&hello, &self.approver, false);
                self.hello = hello;
            }
            // Down again: the next call that reaches it re-pins, and the old hello stands.
            Err(error) => tracing::warn!(error = ?error, "hello after a restart failed"),
        }
    }

    /// The argument names a mutating tool accepts: its own, plus the escalation fields while
    /// they are advertised.
    fn allowed_args(&self, own: &[&'static str]) -> Vec<&'static str> {
        let mut names = own.to_vec();
        if self.escalation.is_some() {
            names.extend([escalation_fields::MODE_FIELD, escalation_fields::REASON_FIELD]);
        }
        names
    }

    /// The tools' schemas as a host that can ask the person (`host_asks`: an MCP client with
    /// elicitation) or cannot should list them: the escalation fields only where a wider mode
    /// is on offer and someone can be asked.
    pub fn schemas_for_host(&self, host_asks: bool) -> Vec<Value> {
        let mut tools = self.tools.clone();
        tools.escalation =
            self.escalation.is_some() && someone_to_ask(&self.hello, &self.approver, host_asks);
        tools.schemas()
    }

    /// Sends prompts to this host instead of the terminal (the MCP face, per call).
    pub fn set_host(&mut self, host: Option<std::sync::Arc<dyn crate::local_approver::Host>>) {
        self.host = host;
    }

    /// The client's own approver on one escalation (`client` trust).
    async fn decide(&mut self, ask: &crate::local_approver::Ask<'_>) -> crate::local_approver::Verdict {
        use crate::local_approver::{HostAnswer, RefusedBy, Verdict};
        match (&self.approver, &self.host) {
            (Approver::Prompt, Some(host)) => match host.ask(crate::local_approver::message(ask)).await {
                HostAnswer::Approved => Verdict::Approved,
                HostAnswer::Refused(reason) => Verdict::Refused { by: RefusedBy::User, reason },
                HostAnswer::Unsupported => {
                    Verdict::Refused { by: RefusedBy::NoElicitation, reason: String::new() }
                }
            },
            (approver, _) => approver.verdict(ask),
        }
    }

    /// A path as the model gave it, made absolute against the session's cwd.
    fn absolute(&self, path: &str) -> String {
        // A Windows path (`C:\\Users\\x.txt`, `C:/x`) goes to the daemon as given, which refuses
        // it as FS_INVALID_PATH, instead of becoming a literal name below the cwd.
        let bytes = path.as_bytes();
        if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
            return path.to_owned();
        }
        let joined = if path.starts_with('/') { PathBuf::from(path) } else { self.cwd.join(path) };
        // Only `.` and repeated slashes go: `..` is for the daemon to resolve, after links.
        let mut clean = PathBuf::new();
        for c in joined.components() {
            match c {
                Component::CurDir => {}
                other => clean.push(other.as_os_str()),
            }
        }
        let mut clean = clean.to_string_lossy().into_owned();
        // A trailing slash says "a directory": the daemon refuses it on a file, so keep it.
        if path.ends_with('/') && !clean.ends_with('/') {
            clean.push('/');
        }
        clean
    }

    fn policy_on(&self) -> bool {
        self.tools.config.observation_policy
    }

    /// Remembers what a path resolved to.
    fn learn(&mut self, paths: &[&str], key: &str) {
        for p in paths {
            self.keys.insert((*p).to_owned(), TargetKey(key.to_owned()));
        }
    }

    fn key_of(&self, path: &str) -> Option<&TargetKey> {
        self.keys.get(path)
    }

    fn record_present(&mut self, paths: &[&str], target: &Target, version: &Version) {
        self.learn(paths, &target.key.0);
        self.learn(&[&target.display], &target.key.0);
        self.observations.record_present(target.key.clone(), version.clone());
    }

    /// The guard a whole-file write carries: the policy's (replace at the observed version, else
    /// create only) with the target key learnt for the path; none with the policy off.
    fn write_guard(&self, path: &str) -> Option<WriteGuard> {
        if !self.policy_on() {
            return None;
        }
        let key = self.key_of(path).cloned();
        Some(WriteGuard::from_policy(self.observations.write_intent(key.as_ref()), key))
    }

    /// The guard an edit (or a delete or move of the file) carries: the observed version and
    /// key; `Ok(None)` with the policy off.
    fn edit_guard(&self, path: &str) -> Result<Option<VersionGuard>, EditRefusal> {
        if !self.policy_on() {
            return Ok(None);
        }
        let key = self.key_of(path).cloned();
        let version = self.observations.edit_intent(key.as_ref())?;
        Ok(Some(VersionGuard::new(version, key)))
    }

    fn record_absent(&mut self, path: &str, key: Option<&str>) {
        if let Some(key) = key {
            self.learn(&[path], key);
            self.observations.record_absent(TargetKey(key.to_owned()));
        }
    }
}

/// The paths a patch names (`*** Add File: P`, `*** Update File: P`, `*** Delete File: P`,
/// `*** Move to: P`), for the hint only; the patch parser decides what the patch does.
fn patch_paths(input: &str) -> impl Iterator<Item = &str> {
    input.lines().filter_map(|line| {
        ["*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: "]
            .iter()
            .find_map(|prefix| line.strip_prefix(prefix))
            .map(str::trim)
    })
}

fn unique_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// A unified diff for a diff card. Line diffs are quadratic in the worst case, so the diff gets a
/// deadline and falls back to a coarser (still correct) result past it.
pub(crate) fn unified_diff(path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        .timeout(std::time::Duration::from_millis(100))
        .diff_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(path, path)
        .to_string()
}

/// Diff metadata for a change, bounded by what the daemon returned.
fn diff_meta(path: &str, change: Option<&TextChange>) -> Value {
    match change {
        Some(TextChange { before: Some(before), after: Some(after), omitted: false }) => {
            // Diff cards show LF text; the file's own endings stay on disk.
            let (before, after) = (before.replace("\r\n", "\n"), after.replace("\r\n", "\n"));
            let unified = unified_diff(path, &before, &after);
            json!({ "path": path, "oldText": before, "newText": after, "diff": unified })
        }
        _ => json!({ "path": path, "omitted": true }),
    }
}
