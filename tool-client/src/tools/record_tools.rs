//! The change record's tools, `checkpoint`, `changes` and `rewind` (docs/rewind.md), offered
//! only with `changeTools = true`: the arguments are checked here, and the daemon calls, the
//! reply sentences and the metadata are the JSON-lines session's (`crate::record_commands`), so each
//! text is written once.

use serde_json::Value;

use super::{Session, ToolResult, args};
use crate::daemon::ChangesQuery;
use crate::failure::ToolError;

/// `checkpoint {label?}`: names the current point.
pub async fn checkpoint(session: &mut Session, args: &Value) -> Result<ToolResult, ToolError> {
    let map = args::object(args, &["label"])?;
    let label = args::optional_string(map, "label")?.unwrap_or_default();
    Ok(crate::record_commands::checkpoint(session, &label).await)
}

/// `changes {since, this_session?}`: the changes after the point, each file with its diff.
pub async fn changes(session: &mut Session, args: &Value) -> Result<ToolResult, ToolError> {
    let map = args::object(args, &["since", "this_session"])?;
    let query = query(map)?;
    Ok(crate::record_commands::changes(session, &query).await)
}

/// `rewind {since, this_session?, keep_checkpoint?}`: the files back to the point.
pub async fn rewind(session: &mut Session, args: &Value) -> Result<ToolResult, ToolError> {
    let map = args::object(args, &["since", "this_session", "keep_checkpoint"])?;
    let query = query(map)?;
    let keep = args::boolean(map, "keep_checkpoint")?.unwrap_or(false);
    Ok(crate::record_commands::rewind(session, &query, keep).await)
}

/// The selection a model's call makes: its own identity's changes (never another's), by default
/// only this session's.
fn query(map: &serde_json::Map<String, Value>) -> Result<ChangesQuery, ToolError> {
    Ok(ChangesQuery {
        since: args::point(map, "since")?,
        this_session: args::boolean(map, "this_session")?.unwrap_or(true),
        identity: None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(args: Value, expected: Result<ChangesQuery, &str>) {
        let got = args::object(&args, &["since", "this_session"]).and_then(query).map_err(|e| e.text());
        assert_eq!(got, expected.map_err(str::to_owned), "{args}");
    }

    /// What a call's arguments select, and the argument mistakes' texts, byte-exact.
    #[test]
    fn arguments_select_the_sessions_own_changes_by_default() {
        let ours = |since: u64, this_session: bool| ChangesQuery { since, this_session, identity: None };
        check(json!({"since": 4}), Ok(ours(4, true)));
        check(json!({"since": 0, "this_session": false}), Ok(ours(0, false)));
        check(json!({"since": 4, "this_session": null}), Ok(ours(4, true)));
        let point = "Error: since must be a checkpoint's id (a non-negative integer)";
        check(json!({}), Err(point));
        check(json!({"since": -1}), Err(point));
        check(json!({"since": "4"}), Err(point));
        check(json!({"since": 1.5}), Err(point));
        check(json!({"since": 4, "this_session": "yes"}), Err("Error: this_session must be a boolean"));
        check(json!({"since": 4, "identity": "*"}), Err("Error: unknown argument \"identity\""));
        let label =
            args::object(&json!({"label": 3}), &["label"]).and_then(|m| args::optional_string(m, "label"));
        assert_eq!(label.map_err(|e| e.text()), Err("Error: label must be a string".to_owned()));
    }

    /// One key turns the three on, after the other tools; off, they are refused with that key.
    #[test]
    fn one_key_offers_the_three_after_the_others() {
        use crate::config::ClientConfig;
        use crate::tools::Tools;
        let off = Tools::new(ClientConfig::default());
        assert_eq!(off.visible(), ["read", "write", "edit"]);
        for name in ["checkpoint", "changes", "rewind"] {
            assert_eq!(
                off.not_offered(name),
                format!(
                    "tool \"{name}\" is off in this client; changeTools = true in the client config (--config FILE) turns it on"
                )
            );
        }
        let on = Tools::new(ClientConfig { change_tools: true, ..ClientConfig::default() });
        assert_eq!(on.visible(), ["read", "write", "edit", "checkpoint", "changes", "rewind"]);
        assert_eq!(on.guidance(), off.guidance());
        let config: ClientConfig = toml::from_str("changeTools = true").unwrap_or_default();
        assert!(config.change_tools);
    }
}
