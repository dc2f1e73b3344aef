//! `fsd-tools doctor ENDPOINT`: what a daemon serves, as its hello says (version, roots, modes
//! and how each is fenced, limits, escalation trust, the TLS certificate in use), and whether a client configuration fits
//! it. For people setting up a host, not for models.

use std::fmt::Write;

use fsd_proto::v1;

use crate::config::ClientConfig;
use crate::connect::Endpoint;
use crate::tools::Tools;

fn mode_name(mode: i32) -> &'static str {
    match v1::Mode::try_from(mode) {
        Ok(v1::Mode::ReadOnly) => "read-only",
        Ok(v1::Mode::WorkspaceWrite) => "workspace-write",
        Ok(v1::Mode::DangerFullAccess) => "danger-full-access",
        _ => "unspecified",
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

fn escalation_words(escalation: &str) -> &'static str {
    match escalation {
        "deny" => "deny (no call runs above the default mode)",
        "client" => "client (the client's approver is trusted; calls may ask for a wider mode)",
        "signed" => "signed (a wider mode needs a description signed by the approver's key)",
        _ => "unknown",
    }
}

/// The report: one fact a line, then the configuration's findings (`ok` or what does not fit).
pub fn report(endpoint: &Endpoint, hello: &v1::HelloReply, config: Option<&ClientConfig>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "daemon at {endpoint}");
    let _ = writeln!(
        out,
        "  version {} (protocol {}), Landlock ABI {}",
        hello.daemon_version,
        hello.protocol_version,
        if hello.landlock_abi == 0 { "none".to_owned() } else { hello.landlock_abi.to_string() }
    );
    for root in &hello.writable_roots {
        let _ = writeln!(out, "  root {root} (writable)");
    }
    // A writable root is readable too; the hello lists it under both.
    for root in hello.readable_roots.iter().filter(|r| !hello.writable_roots.contains(r)) {
        let _ = writeln!(out, "  root {root} (read-only)");
    }
    if !hello.protected_names.is_empty() {
        let _ =
            writeln!(out, "  read-only names under workspace-write: {}", hello.protected_names.join(", "));
    }
    let _ = writeln!(
        out,
        "  default mode {}, highest mode for this client {}",
        mode_name(hello.default_mode),
        mode_name(hello.max_mode)
    );
    for mode in &hello.modes {
        let state = if mode.available { "served" } else { "NOT served" };
        let _ = write!(out, "  mode {}: {state}, fence {}", mode_name(mode.mode), mode.enforcement);
        if !mode.reason.is_empty() {
            let _ = write!(out, " ({})", mode.reason);
        }
        out.push('\n');
    }
    if let Some(l) = &hello.limits {
        let _ = writeln!(
            out,
            "  limits: message {}, editable file {}, read {}, diff text {}, {} directory entries, path {}",
            bytes(l.max_message_bytes),
            bytes(l.max_editable_file_bytes),
            bytes(l.max_read_bytes),
            bytes(l.max_diff_text_bytes),
            l.max_dir_entries,
            bytes(l.max_path_bytes)
        );
    }
    let _ = writeln!(out, "  escalation: {}", escalation_words(&hello.escalation));
    if let Some(tls) = &hello.tls_certificate {
        // Rotated certificates show here without a restart: the one new handshakes get.
        let expires = u64::try_from(tls.not_after)
            .map(|secs| format!("{} UTC", fsd_proto::time::Civil::from_unix(secs).format(' ')))
            .unwrap_or_else(|_| tls.not_after.to_string());
        let _ = writeln!(out, "  TLS certificate: serial {}, expires {expires}", tls.serial);
    }
    if let Some(config) = config {
        out.push_str(&check_config(hello, config));
    }
    out.trim_end().to_owned()
}

/// What in a client configuration does not fit the daemon.
fn check_config(hello: &v1::HelloReply, config: &ClientConfig) -> String {
    let mut findings = Vec::new();
    let limits = hello.limits.unwrap_or_default();
    if limits.max_read_bytes > 0 && config.read_max_bytes > limits.max_read_bytes {
        findings.push(format!(
            "readMaxBytes {} is above the daemon's max_read_bytes {}: reads stop at the daemon's",
            bytes(config.read_max_bytes),
            bytes(limits.max_read_bytes)
        ));
    }
    let escalates = config.escalation_rules.is_some() || config.escalation_prompt;
    if escalates && hello.escalation == "deny" {
        findings.push("an approver is configured, but the daemon denies every escalation".to_owned());
    }
    if escalates && hello.escalation == "signed" {
        findings.push(
            "escalationRules and escalationPrompt are not used: the daemon asks its own approver".to_owned(),
        );
    }
    if config.read_image && config.image_input && config.attachment_store.is_none() {
        findings.push("read_image needs attachmentStore (a directory for the images it saves)".to_owned());
    }
    let read_only = hello.max_mode == v1::Mode::ReadOnly as i32;
    if read_only && (config.write || config.edit || config.apply_patch) {
        findings.push(
            "this client may only read (highest mode read-only): write, edit and apply_patch will be refused; \
             the daemon's client_max_modes raises it (plaintext loopback TCP is the identity tcp, read-only \
             unless client_max_modes names it)"
                .to_owned(),
        );
    }
    let tools = Tools::new(config.clone());
    let mut out = format!("client config: tools {}\n", tools.visible().join(", "));
    if findings.is_empty() {
        out.push_str("  ok: the configuration fits this daemon\n");
    }
    for finding in findings {
        let _ = writeln!(out, "  warning: {finding}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_what_the_daemon_serves_and_what_does_not_fit() {
        let hello = v1::HelloReply {
            protocol_version: 1,
            daemon_version: "0.1.0".into(),
            landlock_abi: 7,
            modes: vec![
                v1::ModeStatus {
                    mode: v1::Mode::ReadOnly as i32,
                    available: true,
                    enforcement: "kernel".into(),
                    reason: String::new(),
                },
                v1::ModeStatus {
                    mode: v1::Mode::WorkspaceWrite as i32,
                    available: false,
                    enforcement: "refused".into(),
                    reason: "workers keep exiting at start".into(),
                },
            ],
            default_mode: v1::Mode::ReadOnly as i32,
            max_mode: v1::Mode::ReadOnly as i32,
            escalation: "deny".into(),
            limits: Some(v1::Limits {
                max_message_bytes: 80 << 20,
                max_editable_file_bytes: 10 << 20,
                max_read_bytes: 32 << 10,
                max_diff_text_bytes: 1 << 20,
                max_dir_entries: 10000,
                max_path_bytes: 4096,
            }),
            readable_roots: vec!["/ref".into()],
            writable_roots: vec!["/ws".into()],
            protected_names: vec![".git".into()],
            tls_certificate: Some(v1::TlsCertificate {
                serial: "1122334455667788".into(),
                not_after: 1_800_000_000,
            }),
        };
        let config = ClientConfig { escalation_prompt: true, ..ClientConfig::default() };
        let text = report(&Endpoint::Unix("/run/fsd.sock".into()), &hello, Some(&config));
        assert_eq!(
            text,
            "daemon at unix:/run/fsd.sock
  version 0.1.0 (protocol 1), Landlock ABI 7
  root /ws (writable)
  root /ref (read-only)
  read-only names under workspace-write: .git
  default mode read-only, highest mode for this client read-only
  mode read-only: served, fence kernel
  mode workspace-write: NOT served, fence refused (workers keep exiting at start)
  limits: message 80 MiB, editable file 10 MiB, read 32 KiB, diff text 1 MiB, 10000 directory entries, path 4 KiB
  escalation: deny (no call runs above the default mode)
  TLS certificate: serial 1122334455667788, expires 2027-01-15 08:00:00 UTC
client config: tools read, write, edit
  warning: readMaxBytes 50 KiB is above the daemon's max_read_bytes 32 KiB: reads stop at the daemon's
  warning: an approver is configured, but the daemon denies every escalation
  warning: this client may only read (highest mode read-only): write, edit and apply_patch will be refused; the daemon's client_max_modes raises it (plaintext loopback TCP is the identity tcp, read-only unless client_max_modes names it)"
        );
    }
}
