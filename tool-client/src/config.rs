//! The client configuration: the seed's keys in camelCase, read from TOML (`--config FILE`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Which tools are visible and how they behave. Defaults are the seeds'.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ClientConfig {
    pub read: bool,
    pub write: bool,
    pub edit: bool,
    pub read_image: bool,
    pub apply_patch: bool,
    /// apply_patch commits as one daemon transaction: a failed commit changes nothing (off: the
    /// seed's commit in order, which stops at the first failure and rolls nothing back).
    pub apply_patch_atomic: bool,
    pub str_replace_editor: bool,
    /// The change record's tools, `checkpoint`, `changes` and `rewind` (docs/rewind.md); off:
    /// the seed's tool set.
    pub change_tools: bool,
    pub read_limit: u64,
    pub read_max_line_length: u64,
    pub read_max_bytes: u64,
    pub read_stream_min_size: u64,
    pub observation_policy: bool,
    pub max_output_chars: u64,
    pub description: Option<String>,
    pub attachment_store: Option<PathBuf>,
    pub model: Option<String>,
    pub image_input: bool,
    pub max_image_bytes: Option<u64>,
    pub max_image_pixels: Option<u64>,
    pub max_image_dimension: Option<u64>,
    /// Escalation approver: a rule file (TOML `[[rule]]` mode/path/decision), or a prompt on
    /// the controlling terminal. Neither: every escalation is refused.
    pub escalation_rules: Option<PathBuf>,
    pub escalation_prompt: bool,
    /// The daemon's approver page (`fsd-approver serve`'s `[web] url`), for `signed` trust:
    /// inside an MCP host with URL-mode elicitation the person is sent there for each
    /// escalation this session asks.
    pub approver_url: Option<String>,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            read: true,
            write: true,
            edit: true,
            read_image: true,
            apply_patch: false,
            apply_patch_atomic: false,
            str_replace_editor: false,
            change_tools: false,
            read_limit: 2000,
            read_max_line_length: 2000,
            read_max_bytes: 51200,
            read_stream_min_size: 10 * 1024 * 1024,
            observation_policy: true,
            max_output_chars: 16000,
            description: None,
            attachment_store: None,
            model: None,
            image_input: false,
            max_image_bytes: None,
            max_image_pixels: None,
            max_image_dimension: None,
            escalation_rules: None,
            escalation_prompt: false,
            approver_url: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {0}: {1}")]
    Read(PathBuf, #[source] std::io::Error),
    /// One line, like the daemon's: the toml crate's own rendering spans several (a snippet with
    /// a caret), which a log or an MCP host's error box shows badly.
    #[error("invalid config {}{}: {message}", path.display(), at.map(|(line, column)| format!(":{line}:{column}")).unwrap_or_default())]
    Parse { path: PathBuf, at: Option<(usize, usize)>, message: String },
    #[error(transparent)]
    Approver(#[from] crate::local_approver::ApproverError),
    #[error("invalid config: {0} must be at least 1")]
    Zero(&'static str),
    #[error("invalid config: approverUrl {0:?} must start with https:// or http://")]
    ApproverUrl(String),
}

/// A TOML error as one line: the file, the 1-based line and column (in characters) where the
/// error's span starts, and the message with its line breaks folded.
fn parse_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let at = e.span().map(|span| {
        let before = text.get(..span.start).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |at| at + 1);
        (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
    });
    let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    ConfigError::Parse { path: path.to_owned(), at, message }
}

impl ClientConfig {
    /// Reads a config file; keys it does not set keep their defaults.
    pub fn load(path: &Path) -> Result<ClientConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.to_owned(), e))?;
        let config: ClientConfig = toml::from_str(&text).map_err(|e| parse_error(path, &text, &e))?;
        config.validate()?;
        crate::local_approver::Approver::from_config(
            config.escalation_rules.as_deref(),
            config.escalation_prompt,
        )
        .map_err(ConfigError::Approver)?;
        Ok(config)
    }

    /// Read caps stay validated even while read is disabled (the seed).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.approver_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            return Err(ConfigError::ApproverUrl(url.clone()));
        }
        for (name, value) in [
            ("readLimit", self.read_limit),
            ("readMaxLineLength", self.read_max_line_length),
            ("readMaxBytes", self.read_max_bytes),
            ("readStreamMinSize", self.read_stream_min_size),
            ("maxOutputChars", self.max_output_chars),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seeds() {
        let c = ClientConfig::default();
        assert_eq!(
            (c.read_limit, c.read_max_line_length, c.read_max_bytes, c.read_stream_min_size),
            (2000, 2000, 51200, 10485760)
        );
        assert!(c.read && c.write && c.edit && c.read_image && !c.apply_patch && c.observation_policy);
        assert!(!c.change_tools);
    }

    #[test]
    fn keys_are_camel_case_and_unknown_keys_refused() {
        let c: ClientConfig =
            toml::from_str("applyPatch = true\nreadLimit = 5\nobservationPolicy = false").unwrap_or_default();
        assert!(c.apply_patch && !c.observation_policy);
        assert_eq!(c.read_limit, 5);
        assert!(toml::from_str::<ClientConfig>("read_limit = 5").is_err());
    }
}
