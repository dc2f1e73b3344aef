//! The configuration's resolution, table by table.

use super::*;

fn check(toml_text: &str, flags: Overrides, expected: Result<&str, &str>) {
    let file: ConfigFile = match toml::from_str(toml_text) {
        Ok(f) => f,
        Err(e) => {
            let want = expected.err().unwrap_or("a valid config");
            assert!(e.to_string().contains(want), "{e} does not contain {want}");
            return;
        }
    };
    let got = Config::resolve(file, flags).map(|c| {
        format!(
            "{} {:?} {} {}",
            c.listen.iter().map(ToString::to_string).collect::<Vec<_>>().join(","),
            c.roots.iter().map(|r| (r.path.display().to_string(), r.writable)).collect::<Vec<_>>(),
            c.default_mode.as_str(),
            c.escalation.as_str()
        )
    });
    assert_eq!(got.map_err(|e| e.to_string()), expected.map(str::to_owned).map_err(str::to_owned));
}

fn flags(listen: &[&str], writable: &[&str]) -> Overrides {
    Overrides {
        listen: listen.iter().map(|s| (*s).to_owned()).collect(),
        writable_roots: writable.iter().map(PathBuf::from).collect(),
        ..Overrides::default()
    }
}

#[test]
fn socket_access_values() {
    let check = |mode: Option<&str>, group: Option<&str>, expected: Result<(u32, Option<u32>), &str>| {
        let got = socket_access(mode, group).map(|a| (a.mode, a.gid)).map_err(|e| e.to_string());
        match expected {
            Ok(want) => assert_eq!(got, Ok(want), "{mode:?} {group:?}"),
            Err(want) => {
                assert!(got.as_ref().is_err_and(|e| e.contains(want)), "{mode:?} {group:?}: {got:?}")
            }
        }
    };
    check(None, None, Ok((0o660, None)));
    check(Some("0600"), None, Ok((0o600, None)));
    check(Some("666"), Some("0"), Ok((0o666, Some(0))));
    check(Some("0o640"), Some("root"), Ok((0o640, Some(0))));
    check(Some("0"), None, Ok((0, None)));
    check(Some("01777"), None, Err("invalid socket_mode"));
    check(Some("0689"), None, Err("invalid socket_mode"));
    check(Some(""), None, Err("invalid socket_mode"));
    check(Some("+660"), None, Err("invalid socket_mode"));
    check(None, Some("no-such-group-fsd"), Err("invalid socket_group"));
}

#[test]
fn config_table() {
    check("", flags(&["unix:/s"], &["/ws"]), Ok("unix:/s [(\"/ws\", true)] workspace-write deny"));
    check(
        "listen = [\"tcp:127.0.0.1:7000\"]\nreadable_roots = [\"/r\"]\ndefault_mode = \"read-only\"",
        Overrides::default(),
        Ok("tcp:127.0.0.1:7000 [(\"/r\", false)] read-only deny"),
    );
    // Flags override the file.
    check(
        "writable_roots = [\"/a\"]",
        flags(&["unix:/s"], &["/b"]),
        Ok("unix:/s [(\"/b\", true)] workspace-write deny"),
    );
    check(
        "",
        flags(&["tcp:0.0.0.0:1"], &["/ws"]),
        Err(
            "listener tcp:0.0.0.0:1 is not on loopback: a non-loopback TCP listener needs TLS (set tls_cert and tls_key)",
        ),
    );
    check(
        "",
        flags(&["http+plain:127.0.0.1:8080"], &["/ws"]),
        Ok("http+plain:127.0.0.1:8080 [(\"/ws\", true)] workspace-write deny"),
    );
    check(
        "tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"",
        flags(&["http+plain:0.0.0.0:8080"], &["/ws"]),
        Err("invalid listen address \"http+plain:0.0.0.0:8080\": a plaintext listener must be on loopback"),
    );
    check("", flags(&[], &["/ws"]), Err("no listen address: pass --listen unix:PATH or tcp:127.0.0.1:PORT"));
    check("", flags(&["unix:/s"], &[]), Err("no root: pass --writable-root DIR or --readable-root DIR"));
    check(
        "escalation = \"signed\"",
        flags(&["unix:/s"], &["/ws"]),
        Err("escalation = \"signed\" needs approver_public_key (64 hex digits)"),
    );
    let key = "approver_public_key = \"d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a\"";
    check(
        &format!("escalation = \"signed\"\n{key}"),
        flags(&["unix:/s"], &["/ws"]),
        Err(
            "escalation = \"signed\" needs approver_endpoint (unix:PATH or tcp:HOST:PORT of fsd-approver serve)",
        ),
    );
    check(
        &format!("escalation = \"signed\"\n{key}\napprover_endpoint = \"approver.sock\""),
        flags(&["unix:/s"], &["/ws"]),
        Err("invalid approver_endpoint \"approver.sock\": expected unix:PATH or tcp:HOST:PORT"),
    );
    // The approver's token: read at start, in the approver's own form.
    let dir = std::env::temp_dir().join(format!("fsd-config-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (short, good) = (dir.join("short"), dir.join("good"));
    std::fs::write(&short, "short\n").unwrap();
    std::fs::write(&good, "alpha-daemon-token-0123\n").unwrap();
    let signed = format!("escalation = \"signed\"\n{key}\napprover_endpoint = \"unix:/a.sock\"\n");
    check(
        &format!("{signed}approver_token_file = \"{}\"", short.display()),
        flags(&["unix:/s"], &["/ws"]),
        Err(&format!(
            "invalid approver_token_file {}: a token is one line of at least 16 letters, digits, '-', '.', '_' or '~'",
            short.display()
        )),
    );
    check(
        &format!("{signed}approver_token_file = \"{}\"", dir.join("absent").display()),
        flags(&["unix:/s"], &["/ws"]),
        Err(&format!(
            "invalid approver_token_file {}: No such file or directory (os error 2)",
            dir.join("absent").display()
        )),
    );
    check(
        &format!("{signed}approver_token_file = \"{}\"", good.display()),
        flags(&["unix:/s"], &["/ws"]),
        Ok("unix:/s [(\"/ws\", true)] workspace-write signed"),
    );
    // A tcp: approver off loopback only over TLS; TLS only to a tcp: approver; a certificate
    // only with the CA, and with its key.
    let tcp =
        |host: &str| format!("escalation = \"signed\"\n{key}\napprover_endpoint = \"tcp:{host}:7443\"\n");
    let ca = format!("approver_ca_file = \"{}\"\n", good.display());
    let tls_cases: [(String, Result<&str, String>); 7] = [
        (tcp("127.0.0.1"), Ok("unix:/s [(\"/ws\", true)] workspace-write signed")),
        (tcp("localhost"), Ok("unix:/s [(\"/ws\", true)] workspace-write signed")),
        (
            tcp("approver.internal"),
            Err("approver_endpoint tcp:approver.internal:7443 is not on loopback: the daemon's descriptions and the approver's answers would cross the network in the clear; set approver_ca_file (the approver serves TLS with its [grpc] table)".into()),
        ),
        (format!("{}{ca}", tcp("approver.internal")), Ok("unix:/s [(\"/ws\", true)] workspace-write signed")),
        (
            format!("{signed}{ca}"),
            Err("invalid approver TLS settings: approver_ca_file is for a tcp: approver_endpoint (a unix: socket is guarded by its permissions)".into()),
        ),
        (
            format!("{}approver_client_cert = \"{}\"\napprover_client_key = \"{}\"\n", tcp("10.0.0.1"), good.display(), good.display()),
            Err("invalid approver TLS settings: approver_client_cert needs approver_ca_file (the approver's CA): a certificate is presented only over TLS".into()),
        ),
        (
            format!("{}{ca}approver_client_cert = \"{}\"\n", tcp("10.0.0.1"), good.display()),
            Err("invalid approver TLS settings: approver_client_cert and approver_client_key go together".into()),
        ),
    ];
    for (text, expected) in &tls_cases {
        check(text, flags(&["unix:/s"], &["/ws"]), expected.as_ref().map(|s| *s).map_err(String::as_str));
    }
    let _ = std::fs::remove_dir_all(&dir);
    check(
        "escalation = \"maybe\"",
        flags(&["unix:/s"], &["/ws"]),
        Err("invalid escalation \"maybe\": expected \"deny\", \"client\" or \"signed\""),
    );
    check(
        "default_mode = \"danger-full-access\"\nmax_mode = \"read-only\"",
        flags(&["unix:/s"], &["/ws"]),
        Err("default_mode danger-full-access is wider than max_mode read-only"),
    );
    check("bogus = 1", flags(&["unix:/s"], &["/ws"]), Err("unknown field `bogus`"));
    check(
        "audit_signing_key = \"/k/audit.key\"",
        flags(&["unix:/s"], &["/ws"]),
        Err("audit_signing_key needs audit_log: it signs that log's checkpoints"),
    );
    check(
        "audit_log = \"/a.jsonl\"\naudit_checkpoint_every = 0",
        flags(&["unix:/s"], &["/ws"]),
        Err("invalid audit_checkpoint_every: must be at least 1"),
    );
    check(
        "landlock = \"maybe\"",
        flags(&["unix:/s"], &["/ws"]),
        Err("invalid landlock \"maybe\": expected \"required\" or \"best-effort\""),
    );
    check(
        "link_protection = \"off\"",
        flags(&["unix:/s"], &["/ws"]),
        Err("invalid link_protection \"off\": expected \"enable\" or \"require\""),
    );
    check(
        "[client_max_modes]\nalice = \"read-only\"",
        flags(&["unix:/s"], &["/ws"]),
        Err(
            "invalid client_max_modes key \"alice\": expected uid:UID (or a bare uid), cert:NAME, token:NAME, tcp or pod",
        ),
    );
}

/// TLS, tokens and identity keys: what a fleet daemon's config may and may not say.
#[test]
fn fleet_config_table() {
    let hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    let tls = "tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n";
    let fleet = |text: &str| -> Result<Config, String> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| e.to_string())?;
        Config::resolve(file, flags(&[], &["/ws"])).map_err(|e| e.to_string())
    };
    let listen = "listen = [\"tcp:10.99.0.1:7443\"]\n";
    // TLS with required client certificates may listen beyond loopback.
    let ok =
        fleet(&format!("{listen}{tls}tls_client_ca = \"/ca.pem\"")).map(|c| c.tls.map(|t| t.client_certs));
    assert_eq!(ok, Ok(Some(crate::tls::ClientCerts::Required)));
    // Server-only TLS needs tokens, or nobody could authenticate.
    assert_eq!(
        fleet(&format!("{listen}{tls}")).err().as_deref(),
        Some(
            "invalid TLS settings: TLS without required client certificates (no tls_client_ca, or tls_client_cert = \"optional\") needs bearer tokens ([tokens.NAME]): no client could authenticate",
        )
    );
    let with_token = fleet(&format!("{listen}{tls}[tokens.ci]\nsha256 = \"{hash}\"\ncert = \"agent-a\""));
    assert_eq!(
        with_token.map(|c| (c.tokens[0].name.clone(), c.tokens[0].cert.clone())),
        Ok(("ci".into(), Some("agent-a".into())))
    );
    assert_eq!(
        fleet(&format!("{listen}{tls}[tokens.ci]\nsha256 = \"abc\"")).err().as_deref(),
        Some("invalid token \"ci\": sha256 must be 64 hex digits (sha256sum of the token)")
    );
    assert_eq!(
        fleet(&format!("listen = [\"tcp:127.0.0.1:1\"]\n[tokens.ci]\nsha256 = \"{hash}\"")).err().as_deref(),
        Some("invalid TLS settings: bearer tokens are accepted only over TLS: set tls_cert and tls_key")
    );
    assert_eq!(
        fleet(&format!("{listen}tls_cert = \"/c.pem\"")).err().as_deref(),
        Some("invalid TLS settings: tls_cert and tls_key go together")
    );
    assert_eq!(
        fleet(&format!("{listen}{tls}tls_client_ca = \"/ca.pem\"\ntls_client_cert = \"sometimes\""))
            .err()
            .as_deref(),
        Some("invalid TLS settings: tls_client_cert must be \"required\" or \"optional\"")
    );
    assert_eq!(
        fleet("listen = [\"unix:/s\"]\nhealth_listen = \"0.0.0.0:8081\"").err().as_deref(),
        Some("invalid health_listen \"0.0.0.0:8081\": expected tcp:IP:PORT")
    );
    // Identity keys: bare uids keep working beside the new forms.
    let keys = fleet("listen = [\"unix:/s\"]\nmax_mode = \"danger-full-access\"\n[client_max_modes]\n1000 = \"read-only\"\n\"uid:1001\" = \"workspace-write\"\n\"cert:agent-a\" = \"read-only\"\n\"token:ci\" = \"danger-full-access\"")
        .map(|c| c.client_max_modes.iter().map(|(k, m)| format!("{k}={}", m.as_str())).collect::<Vec<_>>().join(" "));
    assert_eq!(
        keys.as_deref(),
        Ok("uid:1000=read-only uid:1001=workspace-write cert:agent-a=read-only token:ci=danger-full-access")
    );
    let limits = fleet("listen = [\"unix:/s\"]\nmax_concurrent_streams = 0").err();
    assert_eq!(limits.as_deref(), Some("invalid max_concurrent_streams: must be at least 1"));
}

/// The pod-network listener: plaintext on any address because the operator declared it, its
/// tokens only where `pod_network_tokens` opts that listener in (`true` for the only one, or a
/// list of listeners), and nothing else relaxes with it.
#[test]
fn pod_network_config_table() {
    let hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    let token = format!("[tokens.router]\nsha256 = \"{hash}\"\n");
    let tls = "tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n";
    let pod = |text: &str| -> Result<String, String> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| e.to_string())?;
        Config::resolve(file, flags(&[], &["/ws"])).map_err(|e| e.to_string()).map(|c| {
            let listen = c.listen.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
            let over_pod = c.pod_network_tokens.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
            format!("{listen} tokens={} over_pod=[{over_pod}]", c.tokens.len())
        })
    };
    let table: Vec<(String, Result<&str, &str>)> = vec![
        ("listen = [\"http+pod:0.0.0.0:8888\"]".into(), Ok("http+pod:0.0.0.0:8888 tokens=0 over_pod=[]")),
        ("listen = [\"http+pod:[::]:8888\"]".into(), Ok("http+pod:[::]:8888 tokens=0 over_pod=[]")),
        (
            format!("listen = [\"http+pod:10.1.2.3:8888\"]\npod_network_tokens = true\n{token}"),
            Ok("http+pod:10.1.2.3:8888 tokens=1 over_pod=[10.1.2.3:8888]"),
        ),
        // Per listener: two pod listeners, one opted in by name.
        (
            format!(
                "listen = [\"http+pod:0.0.0.0:8888\", \"http+pod:0.0.0.0:8889\"]\npod_network_tokens = [\"http+pod:0.0.0.0:8889\"]\n{token}"
            ),
            Ok("http+pod:0.0.0.0:8888,http+pod:0.0.0.0:8889 tokens=1 over_pod=[0.0.0.0:8889]"),
        ),
        (
            format!(
                "listen = [\"http+pod:0.0.0.0:8888\"]\npod_network_tokens = [\"http+pod:0.0.0.0:8888\", \"http+pod:0.0.0.0:8888\"]\n{token}"
            ),
            Ok("http+pod:0.0.0.0:8888 tokens=1 over_pod=[0.0.0.0:8888]"),
        ),
        // `true` with several pod listeners would be a blanket opt-in: name them.
        (
            format!(
                "listen = [\"http+pod:0.0.0.0:8888\", \"http+pod:0.0.0.0:8889\"]\npod_network_tokens = true\n{token}"
            ),
            Err(
                "invalid pod_network_tokens: true is for a daemon with one http+pod: listener; with several, list those that take tokens: [\"http+pod:IP:PORT\"]",
            ),
        ),
        (
            format!(
                "listen = [\"http+pod:0.0.0.0:8888\"]\npod_network_tokens = [\"http+pod:0.0.0.0:9999\"]\n{token}"
            ),
            Err(
                "invalid pod_network_tokens entry \"http+pod:0.0.0.0:9999\": this daemon has no such http+pod: listener",
            ),
        ),
        (
            format!(
                "listen = [\"http+pod:0.0.0.0:8888\", \"http+plain:127.0.0.1:8080\"]\npod_network_tokens = [\"http+plain:127.0.0.1:8080\"]\n{token}"
            ),
            Err("invalid pod_network_tokens entry \"http+plain:127.0.0.1:8080\": expected http+pod:IP:PORT"),
        ),
        (
            format!("listen = [\"http+pod:0.0.0.0:8888\"]\npod_network_tokens = []\n{token}"),
            Err(
                "invalid pod_network_tokens: an empty list opts in nowhere: leave the key out, or name http+pod: listeners",
            ),
        ),
        // Beside TLS for everything else: the TLS listener keeps its rules.
        (
            format!("listen = [\"http+pod:0.0.0.0:8888\", \"http:0.0.0.0:8443\"]\n{tls}{token}"),
            Ok("http+pod:0.0.0.0:8888,http:0.0.0.0:8443 tokens=1 over_pod=[]"),
        ),
        (
            "listen = [\"http+pod:pod:8888\"]".into(),
            Err("invalid listen address \"http+pod:pod:8888\": expected http+pod:IP:PORT"),
        ),
        // Tokens without TLS still need the opt-in...
        (
            format!("listen = [\"http+pod:0.0.0.0:8888\"]\n{token}"),
            Err("invalid TLS settings: bearer tokens are accepted only over TLS: set tls_cert and tls_key"),
        ),
        (
            "listen = [\"http+pod:0.0.0.0:8888\"]\npod_network_tokens = false\n".to_owned() + &token,
            Err("invalid TLS settings: bearer tokens are accepted only over TLS: set tls_cert and tls_key"),
        ),
        // ...which does nothing, and so is refused, without a pod listener or a token.
        (
            format!("listen = [\"http+plain:127.0.0.1:8080\"]\npod_network_tokens = true\n{token}"),
            Err("invalid pod_network_tokens: it applies to http+pod: listeners and there is none"),
        ),
        (
            "listen = [\"http+pod:0.0.0.0:8888\"]\npod_network_tokens = true".into(),
            Err("invalid pod_network_tokens: no token to accept: add [tokens.NAME]"),
        ),
        // Nothing else relaxes: other plaintext listeners stay on loopback.
        (
            "listen = [\"http+pod:0.0.0.0:8888\", \"http:0.0.0.0:8080\"]".into(),
            Err(
                "listener http:0.0.0.0:8080 is not on loopback: a non-loopback TCP listener needs TLS (set tls_cert and tls_key)",
            ),
        ),
        (
            format!(
                "listen = [\"http+pod:0.0.0.0:8888\", \"tcp:0.0.0.0:7443\"]\npod_network_tokens = true\n{token}"
            ),
            Err(
                "listener tcp:0.0.0.0:7443 is not on loopback: a non-loopback TCP listener needs TLS (set tls_cert and tls_key)",
            ),
        ),
        (
            "listen = [\"http+pod:0.0.0.0:8888\", \"http+plain:0.0.0.0:8080\"]".into(),
            Err(
                "invalid listen address \"http+plain:0.0.0.0:8080\": a plaintext listener must be on loopback",
            ),
        ),
    ];
    for (text, want) in table {
        assert_eq!(pod(&text), want.map(str::to_owned).map_err(str::to_owned), "{text}");
    }
    let modes = pod("listen = [\"http+pod:0.0.0.0:8888\"]\n[client_max_modes]\npod = \"workspace-write\"");
    assert!(modes.is_ok(), "{modes:?}");
}

#[test]
fn parse_errors_are_one_line_with_their_place() {
    let check = |text: &str, expected: &str| {
        let e = toml::from_str::<ConfigFile>(text).err().unwrap_or_else(|| panic!("{text} parses"));
        let got = parse_error(Path::new("/etc/fsd.toml"), text, &e).to_string();
        assert!(got.starts_with(expected) && !got.contains('\n'), "{text}: {got}");
    };
    check(
        "workers_per_mode = 2\nmax_mode = read-only\n",
        "invalid config /etc/fsd.toml:2:12: string values must be quoted, expected literal string",
    );
    check("\n  listen = [\"unix:/s\"\n", "invalid config /etc/fsd.toml:2:22: unclosed array, expected `]`");
    check(
        "# é\nworkers_per_mode = \"two\"",
        "invalid config /etc/fsd.toml:2:20: invalid type: string \"two\", expected usize",
    );
    // An unknown key names the one that was meant when one is close, never the whole list.
    check(
        "bogus = 1",
        "invalid config /etc/fsd.toml:1:1: unknown key `bogus` (docs/config.md lists every key)",
    );
    check(
        "max_read_byte = 1",
        "invalid config /etc/fsd.toml:1:1: unknown key `max_read_byte` (did you mean `max_read_bytes`?)",
    );
    check(
        "writeable_roots = []",
        "invalid config /etc/fsd.toml:1:1: unknown key `writeable_roots` (did you mean `writable_roots`?)",
    );
    check(
        "[budgets]\ncalls_per_sec = 5",
        "invalid config /etc/fsd.toml:2:1: unknown key `calls_per_sec` (did you mean `calls_per_second`?)",
    );
}

#[test]
fn edit_distances() {
    let check =
        |a: &str, b: &str, expected: usize| assert_eq!(file::edit_distance(a, b), expected, "{a} {b}");
    check("", "", 0);
    check("abc", "", 3);
    check("", "abc", 3);
    check("kitten", "sitting", 3);
    check("max_read_byte", "max_read_bytes", 1);
    check("é", "e", 1);
}

/// Every size, count and time limit refuses 0 with one line naming its key; the three that
/// mean something at 0 keep it.
#[test]
fn zero_limits_are_refused_by_key() {
    let check = |text: &str, expected: Result<(), &str>| {
        let file: ConfigFile = toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let got = Config::resolve(file, flags(&["unix:/s"], &["/ws"])).map(drop).map_err(|e| e.to_string());
        assert_eq!(got, expected.map_err(str::to_owned), "{text}");
    };
    for key in [
        "max_read_bytes",
        "max_editable_file_bytes",
        "max_message_bytes",
        "max_upload_bytes",
        "max_dir_entries",
        "workers_per_mode",
        "max_queued_calls",
        "max_connections",
        "max_unix_connections",
        "max_unix_connections_per_uid",
        "max_concurrent_streams",
        "max_calls_per_connection",
        "max_handshakes",
        "max_handshakes_per_source",
        "call_timeout_ms",
        "shutdown_grace_ms",
        "stream_idle_timeout_ms",
        "escalation_ttl_secs",
    ] {
        let expected = match key {
            "workers_per_mode" => "workers_per_mode must be between 1 and 64".to_owned(),
            _ => format!("invalid {key}: must be at least 1"),
        };
        check(&format!("{key} = 0"), Err(&expected));
    }
    check(
        "[budgets]
calls_in_flight = 0",
        Err("invalid budgets.calls_in_flight: must be a positive number (bursts at least 1)"),
    );
    check("max_diff_text_bytes = 0", Ok(()));
    check("max_abandoned_workers = 0", Ok(()));
    check("min_upload_bytes_per_sec = 0", Ok(()));
    check("max_read_bytes = 1\nmax_dir_entries = 1\nmax_upload_bytes = 1", Ok(()));
}

#[test]
fn protected_names_and_read_denied_patterns() {
    let resolve = |toml_text: &str| {
        let file: ConfigFile = toml::from_str(toml_text).unwrap();
        let c = Config::resolve(file, flags(&["unix:/tmp/fsd-test.sock"], &["/tmp"])).unwrap();
        (c.protected_names, c.read_denied)
    };
    let (protected, denied) = resolve("");
    assert_eq!(protected, DEFAULT_PROTECTED_NAMES.iter().map(|(n, _)| *n).collect::<Vec<_>>());
    assert_eq!(denied, DEFAULT_READ_DENIED.iter().map(|(p, _)| *p).collect::<Vec<_>>());
    // Every default is already anchored, so the list the daemon enforces is the list documented.
    assert!(denied.iter().all(|p| p.starts_with("**/")));
    for (toml_text, want_protected, want_denied) in [
        // Empty lists turn each rule off (`.git` stays protected by identity: `backend::gitdir`).
        ("protected_names = []\nread_denied = []\n", vec![], vec![]),
        // A pattern without a leading `/` matches at any depth, as a `.gitignore` line does.
        (
            "protected_names = [\".git\"]\nread_denied = [\".env\", \"secrets/*.txt\", \"/srv/keys/**\", \"**/x\", \"\"]\n",
            vec![".git"],
            vec!["**/.env", "**/secrets/*.txt", "/srv/keys/**", "**/x"],
        ),
    ] {
        let (protected, denied) = resolve(toml_text);
        assert_eq!(protected, want_protected, "{toml_text}");
        assert_eq!(denied, want_denied, "{toml_text}");
    }
}

/// The example in docs/protected-and-denied.md is a config the daemon takes.
#[test]
fn the_documented_example_resolves() {
    let page = include_str!("../../../docs/protected-and-denied.md");
    let example = page.split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).unwrap();
    let file: ConfigFile = toml::from_str(example).unwrap();
    let c = Config::resolve(file, flags(&["unix:/tmp/fsd-test.sock"], &["/tmp"])).unwrap();
    assert!(c.protected_names.contains(&".devcontainer".to_owned()));
    assert_eq!(c.read_denied, ["**/.env", "**/*.pem", "**/id_*", "/srv/keys/**"]);
}

#[test]
fn trace_and_metrics_settings() {
    type Resolved = Result<(bool, Option<crate::traces::Settings>), String>;
    let resolve = |text: &str| -> Resolved {
        let file: ConfigFile = toml::from_str(text).map_err(|e| e.to_string())?;
        Config::resolve(file, flags(&["unix:/s"], &["/ws"]))
            .map(|c| (c.metrics, c.traces))
            .map_err(|e| e.to_string())
    };
    let settings = |endpoint: &str, queue, sample_ratio| crate::traces::Settings {
        endpoint: endpoint.to_owned(),
        queue,
        sample_ratio,
        ca: None,
        client: None,
        headers_file: None,
    };
    let traces =
        |endpoint: &str, queue, sample_ratio| Ok((true, Some(settings(endpoint, queue, sample_ratio))));
    let tls = crate::traces::Settings {
        ca: Some("/etc/otel/ca.pem".into()),
        client: Some(("/etc/otel/fsd.pem".into(), "/etc/otel/fsd.key".into())),
        headers_file: Some("/etc/otel/headers".into()),
        ..settings("https://collector.monitoring:4317", 2048, 0.1)
    };
    let endpoint_error = |endpoint: &str| {
        Err(format!(
            "invalid otlp_endpoint {endpoint:?}: expected http://HOST:PORT or https://HOST:PORT (an OTLP/gRPC receiver)"
        ))
    };
    let cases: &[(&str, Resolved)] = &[
        ("", Ok((true, None))),
        ("metrics = false", Ok((false, None))),
        ("otlp_endpoint = \"http://127.0.0.1:4317\"", traces("http://127.0.0.1:4317", 2048, 0.1)),
        (
            "otlp_endpoint = \"http://collector.monitoring:4317\"\ntrace_queue_spans = 10\ntrace_sample_ratio = 0.25",
            traces("http://collector.monitoring:4317", 10, 0.25),
        ),
        ("otlp_endpoint = \"http://[::1]:4317\"", traces("http://[::1]:4317", 2048, 0.1)),
        ("otlp_endpoint = \"https://c:4317\"", traces("https://c:4317", 2048, 0.1)),
        (
            "otlp_endpoint = \"https://collector.monitoring:4317\"\notlp_ca = \"/etc/otel/ca.pem\"\n\
             otlp_client_cert = \"/etc/otel/fsd.pem\"\notlp_client_key = \"/etc/otel/fsd.key\"\n\
             otlp_headers_file = \"/etc/otel/headers\"",
            Ok((true, Some(tls))),
        ),
        ("otlp_endpoint = \"grpc://c:4317\"", endpoint_error("grpc://c:4317")),
        ("otlp_endpoint = \"http://c:4317/v1/traces\"", endpoint_error("http://c:4317/v1/traces")),
        ("otlp_endpoint = \"http://c\"", endpoint_error("http://c")),
        ("otlp_endpoint = \"https://:4317\"", endpoint_error("https://:4317")),
        (
            "otlp_endpoint = \"http://c:4317\"\notlp_ca = \"/ca.pem\"",
            Err("invalid otlp_ca: needs an https:// otlp_endpoint".into()),
        ),
        (
            "otlp_endpoint = \"http://c:4317\"\notlp_client_cert = \"/c.pem\"\notlp_client_key = \"/c.key\"",
            Err("invalid otlp_client_cert: needs an https:// otlp_endpoint".into()),
        ),
        (
            "otlp_endpoint = \"https://c:4317\"\notlp_client_cert = \"/c.pem\"",
            Err("invalid otlp_client_cert: needs otlp_client_key".into()),
        ),
        (
            "otlp_endpoint = \"https://c:4317\"\notlp_client_key = \"/c.key\"",
            Err("invalid otlp_client_key: needs otlp_client_cert".into()),
        ),
        ("otlp_ca = \"/ca.pem\"", Err("invalid otlp_ca: needs otlp_endpoint".into())),
        ("otlp_headers_file = \"/h\"", Err("invalid otlp_headers_file: needs otlp_endpoint".into())),
        ("trace_queue_spans = 10", Err("invalid trace_queue_spans: needs otlp_endpoint".into())),
        ("trace_sample_ratio = 0.5", Err("invalid trace_sample_ratio: needs otlp_endpoint".into())),
        (
            "otlp_endpoint = \"http://c:1\"\ntrace_queue_spans = 0",
            Err("invalid trace_queue_spans: must be at least 1".into()),
        ),
        (
            "otlp_endpoint = \"http://c:1\"\ntrace_sample_ratio = 1.5",
            Err("invalid trace_sample_ratio 1.5: expected a number from 0 to 1".into()),
        ),
    ];
    for (text, want) in cases {
        assert_eq!(&resolve(text), want, "{text}");
    }
}
