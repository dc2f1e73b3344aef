//! The defaults of the two name rules the walk enforces, each entry with its reason: the
//! protected names (read-only under workspace-write, escalation may widen that) and the
//! read-denied patterns (no content, at any mode, ever). One list each, here and nowhere else.

/// `protected_names` when the file does not set it: what an agent could write there runs
/// with the user's authority the next time the user's tools start.
pub const DEFAULT_PROTECTED_NAMES: &[(&str, &str)] = &[
    // Also found by what it is, whatever its name (`backend::gitdir`).
    (".git", "git's config and hooks run on the user's next git command"),
    (".githooks", "the usual core.hooksPath: git runs these hooks on commit, merge and push"),
    (".husky", "husky's git hooks, run by git on commit and push"),
    (".claude", "Claude Code's project settings: hooks, permissions and MCP servers it runs"),
    (".codex", "Codex's project configuration: commands and MCP servers it runs"),
    (".gemini", "Gemini CLI's project settings: tools and MCP servers it runs"),
    (".cursor", "Cursor's rules and MCP servers, loaded when the folder opens"),
    (".vscode", "VS Code's tasks and settings, which run commands when the folder opens"),
    (".mcp.json", "the project's MCP servers: commands an agent host starts"),
];

/// `read_denied` when the file does not set it: files whose whole purpose is a secret. Kept
/// to names that are secrets by convention, so that ordinary work (a `.env.example`, a public
/// certificate) is never refused.
pub const DEFAULT_READ_DENIED: &[(&str, &str)] = &[
    ("**/.env", "dotenv files: API keys and passwords for the environment"),
    ("**/.env.local", "dotenv's local overrides, kept out of version control for their secrets"),
    ("**/.env.*.local", "dotenv's per-environment local overrides, likewise"),
    ("**/*.key", "private keys (TLS, signing)"),
    ("**/*-key.pem", "private keys in PEM, as cfssl and mkcert name them"),
    ("**/privkey.pem", "private keys in PEM, as certbot names them"),
    ("**/*.p12", "PKCS#12 bundles: a private key with its certificate"),
    ("**/*.pfx", "PKCS#12 bundles, Windows' name"),
    ("**/id_rsa", "SSH private keys"),
    ("**/id_ecdsa", "SSH private keys"),
    ("**/id_ed25519", "SSH private keys"),
    ("**/.ssh", "SSH keys and the hosts they open (authorized_keys too: a write there is a login)"),
    ("**/.netrc", "passwords for FTP, HTTP and git hosts"),
    ("**/.git-credentials", "git's stored passwords and tokens"),
    ("**/.aws/credentials", "AWS access keys"),
];

/// The protected names in effect: the configured list, else the default.
pub fn protected_names(configured: Option<Vec<String>>) -> Vec<String> {
    configured.unwrap_or_else(|| DEFAULT_PROTECTED_NAMES.iter().map(|(name, _)| (*name).to_owned()).collect())
}

/// The read-denied patterns in effect, each anchored: one that does not start with `/` matches
/// at any depth (`.env` is `**/.env`), as a `.gitignore` line without a slash does.
pub fn read_denied(configured: Option<Vec<String>>) -> Vec<String> {
    let patterns = configured
        .unwrap_or_else(|| DEFAULT_READ_DENIED.iter().map(|(pattern, _)| (*pattern).to_owned()).collect());
    patterns
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(|p| if p.starts_with('/') || p.starts_with("**") { p } else { format!("**/{p}") })
        .collect()
}
