//! The invariants ARCHITECTURE states that a grep can check, checked over the whole workspace:
//! every `.rs` file opens with a `//!` line; generated `fsd.v1` types appear only in the edge
//! modules (in the tools, tonic types too: they reach the daemon only through `daemon`); `unsafe` appears only in `fsd::sys`; the daemon writes none of the sentences the tools
//! render for the model; no test, bench or soak starts `fsd` except through the shared kit
//! (`testkit/`); only the supervisor reads the config file (in `main.rs`; the children get the
//! resolved configuration from it); no code or metadata word (`reason`, `ticket`, `step`, `lost`)
//! is set or read as a string in the daemon or the tools' failure texts (`fsd_proto`'s enums
//! are); text a person reads is escaped by one function (`fsd_proto::names::for_people`), so no
//! product crate escapes characters itself; the daemon's modules import each other in no circle
//! and its vocabulary (`fsd::op`) imports none of them. Each rule is also run on planted violations, so
//! a rule that silently stopped matching fails here too.

use std::path::{Path, PathBuf};

/// Which invariant a line breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// The file does not open with a `//!` line.
    ModuleDoc,
    /// A generated proto type outside the edge modules.
    ProtoOutsideEdge,
    /// `unsafe` outside `fsd::sys`.
    UnsafeOutsideSys,
    /// A phrase of a model-facing text in the daemon.
    ModelTextInDaemon,
    /// A test, bench or soak source spawning the `fsd` binary itself instead of through the kit.
    DaemonOutsideKit,
    /// The config file loaded in the daemon outside the supervisor's start (`main.rs`).
    ConfigReadOutsideSupervisor,
    /// A code parsed, or a metadata word set or read, as a string rather than its enum.
    StringTypedWord,
    /// A character escaper outside `fsd_proto::names`, the one home of escaping.
    SecondEscaper,
    /// A patch's hunks applied in the daemon outside its workers' pipeline (an escalated
    /// patch's too: the worker's dry run applies them).
    ContentMatchOutsidePipeline,
}

/// Where the daemon applies a patch's hunks or an edit's match: the workers' pipeline.
const MATCHERS: &[&str] = &["fsd/src/backend/"];

#[derive(Debug)]
struct Violation {
    file: String,
    line: usize,
    rule: Rule,
}

/// Crates whose inside must not see generated types: the daemon, the tools, the pure crates.
const PROTO_FREE_CRATES: &[&str] = &["fsd/", "tool-client/", "policy/", "patch/", "text/"];

/// The edge modules of those crates, where wire messages become domain types and back.
const PROTO_EDGES: &[&str] = &[
    // The daemon's gRPC edge and the server it builds.
    "fsd/src/service/",
    "fsd/src/network.rs",
    // The tools' channel, and their one typed client of the daemon (domain types out).
    "tool-client/src/connect/",
    "tool-client/src/daemon/",
    // The same channel over gRPC-Web (HTTP/1.1 routers).
    "tool-client/src/web.rs",
    // `fsd-tools doctor` prints the daemon's hello for an operator, field by field.
    "tool-client/src/doctor.rs",
];

/// Phrases of the texts the tools render (remedies, the seed's marker and hint, the edit tool's
/// wording, the stale and denial reasons): the daemon sends codes and metadata, so none of them
/// belongs in `fsd/src`.
const MODEL_PHRASES: &[&str] = &[
    "re-read",
    "then retry",
    "retry it now",
    "String to replace",
    "matches of the string",
    "since it was read",
    "sandbox_permissions",
    "[sandbox:",
    "file access denied under",
    "is a protected path",
    "no longer exists",
    // Dispatch and stream failures: the daemon sends `reason`, `lost` and `limit_ms`.
    "the outcome is unknown",
    "was not read for",
    "no worker became free",
    "could not take the call",
    "exceeded its deadline",
    // Escalation denials and ticket refusals are worded by the tools from `reason` and `ticket`
    // too, but their labels stay for generic gRPC clients (see `EscalationDenial::label`).
];

/// The daemon's sources.
const DAEMON: &str = "fsd/src/";

/// Where `unsafe` may appear.
const UNSAFE_HOME: &str = "fsd/src/sys/";

/// The crates whose text reaches people, and the one file that escapes it for them.
const PRODUCT: &[&str] = &["fsd/src/", "tool-client/src/", "approver/src/", "proto/src/"];
const ESCAPER: &str = "proto/src/names.rs";

/// The metadata keys whose values are `fsd_proto::reason` enums.
const WORD_KEYS: &[&str] = &["reason", "ticket", "step", "lost"];

/// Whether a line of code sets or reads a code or a metadata word as a string: in the daemon and
/// the tools no code is parsed from text (the wire's decoding in `fsd_proto` does it), no word is
/// set with `.with("reason", ...)`, and the failure texts read none with `get("reason")`.
/// A unit-test file sends the daemon's words as a daemon's bytes would be, strings included.
fn string_typed_word(rel: &str, code: &str) -> bool {
    if rel.ends_with("/tests.rs") {
        return false;
    }
    let typed_crates = [DAEMON, TOOLS, "proto/src/"];
    let sets = typed_crates.iter().any(|c| rel.starts_with(c))
        && WORD_KEYS.iter().any(|k| code.contains(&format!(".with(\"{k}\"")));
    let parses = (rel.starts_with(DAEMON) || rel.starts_with(TOOLS)) && code.contains("ErrorCode::parse(");
    let reads = rel.starts_with("tool-client/src/failure/")
        && WORD_KEYS.iter().any(|k| code.contains(&format!("get(\"{k}\")")));
    sets || parses || reads
}

/// Where the daemon may load its config file: the supervisor's start, and the module itself.
const CONFIG_READERS: &[&str] = &["fsd/src/main.rs", "fsd/src/config/"];

/// The crates that start daemons, which do it only through the kit (`fsd-testkit`, `testkit/`,
/// is none of them).
const HARNESSES: &[&str] = &["tests/", "bench/", "soak/"];

/// `Command::new`, spelled so this file does not plant a violation of its own.
fn command_new() -> String {
    ["Command", "::new("].concat()
}

/// The text of a call's argument list: from just after its `(` to the matching `)` (or the end
/// of the line).
fn argument(rest: &str) -> &str {
    let mut depth = 0usize;
    for (at, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return &rest[..at],
            ')' => depth -= 1,
            _ => {}
        }
    }
    rest
}

/// Whether a program argument is the daemon's path: the harness's `fsd_bin()`, a `Bins`' `.fsd`
/// field, a variable named `fsd`, or the literal binary name. `fsd-tools`, `fsd-approver` and
/// `tools_bin()` are other programs.
fn names_fsd(program: &str) -> bool {
    let bare = program.trim().trim_start_matches('&').trim();
    has_word(program, "fsd_bin") || program.contains("\"fsd\"") || bare == "fsd" || bare.ends_with(".fsd")
}

/// Whether a line of code spawns the daemon itself: `Command::new` (or a namespace helper's
/// `exec(`, whose program is its last argument) given the daemon's path.
fn spawns_fsd(code: &str) -> bool {
    let new = command_new();
    let direct = code.match_indices(new.as_str()).any(|(at, _)| names_fsd(argument(&code[at + new.len()..])));
    let exec = code
        .match_indices(".exec(")
        .any(|(at, _)| argument(&code[at + ".exec(".len()..]).rsplit(',').next().is_some_and(names_fsd));
    direct || exec
}

/// The code part of a line: `//` comments dropped (good enough for these rules, which look for
/// tokens that do not occur inside the workspace's string literals).
fn code_of(line: &str) -> &str {
    match line.find("//") {
        Some(at) => &line[..at],
        None => line,
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `word` occurs in `code` as a whole identifier.
fn has_word(code: &str, word: &str) -> bool {
    code.match_indices(word).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + word.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

/// The crate whose tools see the daemon only through `daemon`: there a tonic type (a status, a
/// response, a stream) is as much a wire type as a generated message.
const TOOLS: &str = "tool-client/";

/// Whether a line of code names a generated `fsd.v1` type or imports the module (in the tools,
/// also a tonic type).
fn names_proto(rel: &str, code: &str) -> bool {
    let path_use =
        code.match_indices("v1::").any(|(at, _)| !code[..at].chars().next_back().is_some_and(is_ident));
    let import = code.contains("fsd_proto::") && has_word(code, "v1");
    let tonic = rel.starts_with(TOOLS) && has_word(code, "tonic");
    path_use || import || tonic
}

/// The violations of one file, `rel` being its path from the workspace root with `/`.
fn check_source(rel: &str, source: &str) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut push = |line: usize, rule: Rule| found.push(Violation { file: rel.to_owned(), line, rule });
    if !source.starts_with("//!") {
        push(1, Rule::ModuleDoc);
    }
    let proto_free = PROTO_FREE_CRATES.iter().any(|c| rel.starts_with(c))
        && !PROTO_EDGES.iter().any(|e| rel.starts_with(e));
    for (index, line) in source.lines().enumerate() {
        let code = code_of(line);
        if proto_free && names_proto(rel, code) {
            push(index + 1, Rule::ProtoOutsideEdge);
        }
        if !rel.starts_with(UNSAFE_HOME) && has_word(code, &unsafe_word()) {
            push(index + 1, Rule::UnsafeOutsideSys);
        }
        if rel.starts_with(DAEMON) && MODEL_PHRASES.iter().any(|p| code.contains(p)) {
            push(index + 1, Rule::ModelTextInDaemon);
        }
        if HARNESSES.iter().any(|h| rel.starts_with(h)) && spawns_fsd(code) {
            push(index + 1, Rule::DaemonOutsideKit);
        }
        if rel.starts_with(DAEMON)
            && !CONFIG_READERS.iter().any(|r| rel.starts_with(r))
            && (code.contains("Config::load(") || has_word(code, "ConfigFile"))
        {
            push(index + 1, Rule::ConfigReadOutsideSupervisor);
        }
        if string_typed_word(rel, code) {
            push(index + 1, Rule::StringTypedWord);
        }
        if PRODUCT.iter().any(|p| rel.starts_with(p)) && rel != ESCAPER && code.contains("escape_unicode(") {
            push(index + 1, Rule::SecondEscaper);
        }
        if rel.starts_with(DAEMON)
            && !MATCHERS.iter().any(|m| rel.starts_with(m))
            && code.contains("apply_chunks(")
        {
            push(index + 1, Rule::ContentMatchOutsidePipeline);
        }
    }
    found
}

/// A line of a harness's Python script that starts the daemon itself: it passes the daemon's
/// root flags. (The tools' `--root` starts their embedded daemon, which is the product under
/// test, not a test daemon.)
fn script_starts_fsd(line: &str) -> bool {
    let code = line.split('#').next().unwrap_or("");
    ["--writable-root", "--readable-root"].iter().any(|flag| code.contains(&format!("\"{flag}\"")))
}

/// The violations of one harness script.
fn check_script(rel: &str, source: &str) -> Vec<Violation> {
    source
        .lines()
        .enumerate()
        .filter(|(_, line)| script_starts_fsd(line))
        .map(|(index, _)| Violation { file: rel.to_owned(), line: index + 1, rule: Rule::DaemonOutsideKit })
        .collect()
}

/// Every `.rs` file under `root`, skipping build output and hidden directories.
fn sources(root: &Path) -> Vec<PathBuf> {
    files(root, ".rs")
}

/// Every file named `*{suffix}` under `root`, skipping build output and hidden directories.
fn files(root: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                if !(name.starts_with('.') || name == "target" || name == "node_modules") {
                    stack.push(entry.path());
                }
            } else if kind.is_file() && name.ends_with(suffix) {
                out.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

fn check_tree(root: &Path) -> Vec<Violation> {
    let mut found = Vec::new();
    for path in sources(root) {
        let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        let source = std::fs::read_to_string(&path).unwrap();
        found.extend(check_source(&rel, &source));
    }
    for path in files(root, ".py") {
        let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        if HARNESSES.iter().any(|h| rel.starts_with(h)) {
            found.extend(check_script(&rel, &std::fs::read_to_string(&path).unwrap()));
        }
    }
    found
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn the_workspace_keeps_its_invariants() {
    let root = workspace_root();
    assert!(sources(&root).len() > 100, "the walk found too few sources under {}", root.display());
    let found = check_tree(&root);
    assert!(found.is_empty(), "invariants broken:\n{found:#?}");
}

/// The word `unsafe`, spelled so this file does not plant a violation of its own.
fn unsafe_word() -> String {
    ["un", "safe"].concat()
}

fn check(rel: &str, source: &str, expected: &[(usize, Rule)]) {
    let got: Vec<(usize, Rule)> = check_source(rel, source).iter().map(|v| (v.line, v.rule)).collect();
    assert_eq!(got, expected, "{rel}:\n{source}");
}

#[test]
fn each_rule_catches_a_planted_violation() {
    let u = unsafe_word();
    check("fsd/src/backend/ok.rs", "//! Fine.\nfn f() {}\n", &[]);
    check("fsd/src/backend/nodoc.rs", "// Not a module doc.\nfn f() {}\n", &[(1, Rule::ModuleDoc)]);
    check("patch/src/empty.rs", "", &[(1, Rule::ModuleDoc)]);
    check(
        "tool-client/src/failure.rs",
        "//! X.\nuse fsd_proto::{ErrorCode, v1};\nfn f(_: fsd_proto::v1::StatRequest) {}\n",
        &[(2, Rule::ProtoOutsideEdge), (3, Rule::ProtoOutsideEdge)],
    );
    check("fsd/src/dispatch.rs", "//! X.\nfn f(r: v1::ReadTextRequest) {}\n", &[(2, Rule::ProtoOutsideEdge)]);
    // The edges, other crates, comments and look-alike names are fine.
    check("fsd/src/service/wire.rs", "//! X.\nuse fsd_proto::v1;\nfn f(_: v1::Target) {}\n", &[]);
    check("tool-client/src/connect/link.rs", "//! X.\nuse fsd_proto::v1::fsd_client::FsdClient;\n", &[]);
    check("tool-client/src/daemon/mod.rs", "//! X.\nuse fsd_proto::v1;\nfn f(_: tonic::Status) {}\n", &[]);
    // A tool executor is no edge: it speaks to the daemon through `daemon`'s domain types.
    check(
        "tool-client/src/tools/read.rs",
        "//! X.\nuse fsd_proto::v1::stream_text_reply::Item;\nfn f(s: &tonic::Status) {}\n",
        &[(2, Rule::ProtoOutsideEdge), (3, Rule::ProtoOutsideEdge)],
    );
    check("tool-client/src/failure.rs", "//! X.\nuse fsd_proto::{ErrorCode, WireError};\n", &[]);
    // tonic is the daemon's server framework: only the tools are held to the daemon module.
    check("fsd/src/edge/mod.rs", "//! X.\nfn f() -> tonic::Status { todo() }\n", &[]);
    check("tests/tests/read.rs", "//! X.\nuse fsd_proto::v1;\n", &[]);
    check("fsd/src/dispatch.rs", "//! X.\n// v1::Target is the wire's; ours is Target.\nfn pv1() {}\n", &[]);
    check(
        "fsd/src/dispatch.rs",
        &format!("//! X.\nfn f() {{ {u} {{ g() }} }}\n"),
        &[(2, Rule::UnsafeOutsideSys)],
    );
    check("tool-client/src/a.rs", &format!("//! X.\n{u} fn f() {{}}\n"), &[(2, Rule::UnsafeOutsideSys)]);
    check("fsd/src/sys/mod.rs", &format!("//! X.\nfn f() {{ {u} {{ g() }} }}\n"), &[]);
    check("fsd/src/main.rs", &format!("//! X.\n#![deny({u}_code)]\n"), &[]);
    check(
        "fsd/src/error.rs",
        "//! X.\n#[error(\"String to replace not found in file.\")]\nEditNotFound,\n",
        &[(2, Rule::ModelTextInDaemon)],
    );
    check(
        "fsd/src/backend/mod.rs",
        "//! X.\nlet why = \"file access denied under workspace-write mode: .git is a protected path\";\n",
        &[(2, Rule::ModelTextInDaemon)],
    );
    // The tools write them; a comment in the daemon may quote them.
    check(
        "tool-client/src/failure.rs",
        "//! X.\nconst R: &str = \" — re-read the file, then retry\";\n",
        &[],
    );
    check("fsd/src/error.rs", "//! X.\n// The tools add \"re-read the file\".\n", &[]);
    // fsd starts only through the kit: not by a test, the bench or the soak.
    let new = command_new();
    check(
        "tests/tests/restart.rs",
        &format!("//! X.\nlet c = {new}common::fsd_bin())\n    .arg(\"--listen\");\n"),
        &[(2, Rule::DaemonOutsideKit)],
    );
    check(
        "tests/tests/x.rs",
        &format!("//! X.\nlet c = {new}fsd_bin()).spawn();\n"),
        &[(2, Rule::DaemonOutsideKit)],
    );
    // Nor by a harness's Python script: the test starts it and the script asks for restarts.
    let script = |source: &str| -> Vec<(usize, Rule)> {
        check_script("tests/mcp/x.py", source).iter().map(|v| (v.line, v.rule)).collect()
    };
    assert_eq!(
        script("argv = [fsd, \"--listen\", sock, \"--writable-root\", root]\n"),
        [(1, Rule::DaemonOutsideKit)]
    );
    assert_eq!(script("args=[\"mcp\", \"--root\", root]  # \"--writable-root\" is the daemon's\n"), []);
    check(
        "soak/src/daemon.rs",
        &format!("//! X.\nlet c = {new}&bins.fsd);\n"),
        &[(2, Rule::DaemonOutsideKit)],
    );
    check(
        "bench/src/procs.rs",
        &format!("//! X.\nlet c = {new}bin_dir.join(\"fsd\"));\n"),
        &[(2, Rule::DaemonOutsideKit)],
    );
    check(
        "bench/src/procs.rs",
        &format!("//! X.\nlet fsd = dir.join(\"fsd\");\nlet c = {new}&fsd);\n"),
        &[(3, Rule::DaemonOutsideKit)],
    );
    check(
        "tests/tests/fleet.rs",
        "//! X.\nns.exec(role, &common::fsd_bin()).args(args).spawn()\n",
        &[(2, Rule::DaemonOutsideKit)],
    );
    // Other programs, the daemon's path as an argument, the kit itself and other crates are fine.
    check(
        "tests/tests/mcp.rs",
        &format!(
            "//! X.\nlet c = {new}common::tools_bin());\nlet p = {new}&python).arg(\"--fsd\").arg(common::fsd_bin());\n\
             let a = {new}approver_bin());\nlet t = {new}\"fsd-tools\");\nlet s = {new}&bins.tools);\n\
             ns.exec(\"c\", &common::tools_bin());\nlet c = common::fsd_command();\n"
        ),
        &[],
    );
    check("testkit/src/bins.rs", &format!("//! X.\nlet c = {new}&self.fsd);\n"), &[]);
    check("tool-client/src/doctor.rs", &format!("//! X.\nlet c = {new}&fsd);\n"), &[]);
    check("tests/tests/x.rs", &format!("//! X.\n// never {new}fsd_bin()) here\n"), &[]);
    // The config file is the supervisor's to read: a child takes what its first frame carries.
    check(
        "fsd/src/worker.rs",
        "//! X.\nlet c = Config::load(Some(&path), flags)?;\nlet f: ConfigFile = toml::from_str(t)?;\n",
        &[(2, Rule::ConfigReadOutsideSupervisor), (3, Rule::ConfigReadOutsideSupervisor)],
    );
    check("fsd/src/main.rs", "//! X.\nlet config = Config::load(args.config.as_deref(), o);\n", &[]);
    check("fsd/src/config/mod.rs", "//! X.\npub fn load(file: Option<&Path>) -> ConfigFile {}\n", &[]);
    check("tests/tests/deploy_examples.rs", "//! X.\nfsd::config::Config::load(Some(&p), o)\n", &[]);
    // Codes and words cross every boundary as `fsd_proto`'s enums.
    check(
        "fsd/src/ipc_messages.rs",
        "//! X.\nlet code = ErrorCode::parse(&self.code).unwrap_or(ErrorCode::IoError);\n",
        &[(2, Rule::StringTypedWord)],
    );
    check(
        "fsd/src/dispatch/mod.rs",
        "//! X.\nwire.with(\"reason\", \"worker_lost\").with(\"lost\", lost)\n",
        &[(2, Rule::StringTypedWord)],
    );
    check(
        "tool-client/src/failure/mod.rs",
        "//! X.\nmatch wire.get(\"step\") {\n",
        &[(2, Rule::StringTypedWord)],
    );
    check("proto/src/code.rs", "//! X.\nlet code = ErrorCode::parse(&info.reason)?;\n", &[]);
    check("fsd/src/error.rs", "//! X.\nwire.with_reason(Reason::Gone).with(\"kept\", kept)\n", &[]);
    check("tool-client/src/mcp.rs", "//! X.\nlet reason = content.get(\"reason\");\n", &[]);
    check("tool-client/src/failure/tests.rs", "//! X.\nwire.with(\"reason\", \"read_only\")\n", &[]);
    check(
        "tests/tests/hardening.rs",
        "//! X.\nassert_eq!(wire.get(\"reason\"), Some(\"protected\"));\n",
        &[],
    );
    // One escaper for what people read.
    check(
        "approver/src/lib.rs",
        "//! X.\ntext.chars().map(|c| c.escape_unicode().to_string()).collect()\n",
        &[(2, Rule::SecondEscaper)],
    );
    check(
        "tool-client/src/local_approver.rs",
        "//! X.\nif hidden(c) { c.escape_unicode().to_string() } else { c.to_string() }\n",
        &[(2, Rule::SecondEscaper)],
    );
    check("proto/src/names.rs", "//! X.\nc.escape_unicode().to_string()\n", &[]);
    // File content is matched in the workers' pipeline only, never in the network process.
    check(
        "fsd/src/service/patched.rs",
        "//! X.\nfsd_patch::apply_chunks(text, chunks).map_err(hunk)\n",
        &[(2, Rule::ContentMatchOutsidePipeline)],
    );
    check(
        "fsd/src/backend/pipeline.rs",
        "//! X.\nlet after = fsd_patch::apply_chunks(current, &chunks)\n",
        &[],
    );
    check("tests/tests/x.rs", "//! X.\nlet shown = c.escape_unicode().to_string();\n", &[]);
}

#[test]
fn the_tree_walk_reports_planted_files() {
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, body: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    };
    write("fsd/src/lib.rs", "//! Fine.\n");
    write("fsd/src/backend/bad.rs", &format!("//! X.\nfn f() {{ {} {{ g() }} }}\n", unsafe_word()));
    write("policy/src/lib.rs", "fn f() {}\n");
    write("tool-client/src/tools/window.rs", "//! X.\nuse fsd_proto::v1;\n");
    write("tool-client/src/daemon/mod.rs", "//! X.\nuse fsd_proto::v1;\n");
    write("tool-client/src/window.rs", "//! X.\nuse fsd_proto::v1;\n");
    write("fsd/src/backend/edit.rs", "//! X.\nconst S: &str = \"file changed on disk since it was read\";\n");
    write("tests/tests/planted.rs", &format!("//! X.\nlet d = {}fsd_bin()).spawn();\n", command_new()));
    write("testkit/src/daemon.rs", &format!("//! X.\nlet d = {}&bins.fsd);\n", command_new()));
    write("target/debug/build/out.rs", "no doc and v1::Target\n");
    write(".hidden/x.rs", "no doc\n");
    let got: Vec<(String, usize, Rule)> =
        check_tree(dir.path()).into_iter().map(|v| (v.file, v.line, v.rule)).collect();
    let expected = vec![
        ("fsd/src/backend/bad.rs".to_owned(), 2, Rule::UnsafeOutsideSys),
        ("fsd/src/backend/edit.rs".to_owned(), 2, Rule::ModelTextInDaemon),
        ("policy/src/lib.rs".to_owned(), 1, Rule::ModuleDoc),
        ("tests/tests/planted.rs".to_owned(), 2, Rule::DaemonOutsideKit),
        ("tool-client/src/tools/window.rs".to_owned(), 2, Rule::ProtoOutsideEdge),
        ("tool-client/src/window.rs".to_owned(), 2, Rule::ProtoOutsideEdge),
    ];
    assert_eq!(got, expected);
}

/// The files of `tests/tests/` that `all.rs` does not declare as modules: cargo builds only
/// `all.rs` (autotests are off), so a file left out would never compile nor run.
fn undeclared_test_files(stems: &[&str], all: &str) -> Vec<String> {
    stems
        .iter()
        .filter(|stem| **stem != "all" && !all.lines().any(|line| line.trim() == format!("mod {stem};")))
        .map(|stem| (*stem).to_owned())
        .collect()
}

#[test]
fn every_test_file_is_a_module_of_the_one_test_binary() {
    let dir = workspace_root().join("tests/tests");
    let stems: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .map(|path| path.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(stems.len() > 30, "the walk found too few test files in {}", dir.display());
    let stems: Vec<&str> = stems.iter().map(String::as_str).collect();
    let all = std::fs::read_to_string(dir.join("all.rs")).unwrap();
    assert_eq!(undeclared_test_files(&stems, &all), Vec::<String>::new());
    // Planted: a new file nobody declared, and a declaration only in a comment.
    let check = |stems: &[&str], all: &str, expected: &[&str]| {
        assert_eq!(undeclared_test_files(stems, all), expected, "{all}");
    };
    check(&["all", "read", "write"], "mod read;\nmod write;\n", &[]);
    check(&["all", "read", "planted"], "mod read;\n", &["planted"]);
    check(&["read"], "// mod read;\n", &["read"]);
}

/// The daemon's vocabulary (`fsd::op`): requests, outcomes, modes, limits. It imports nothing of
/// the daemon, so every process can speak it without the code that touches the disk.
const VOCABULARY: &str = "op";

/// The top-level module of a daemon library source (`fsd/src/backend/write.rs`: `backend`);
/// `None` for the crate roots (`main.rs` is another crate, `lib.rs` only declares modules).
fn daemon_module(rel: &str) -> Option<&str> {
    let inner = rel.strip_prefix(DAEMON)?;
    let first = inner.split('/').next()?;
    let module = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(module, "main" | "lib")).then_some(module)
}

/// The first identifier of `text`.
fn leading_ident(text: &str) -> &str {
    let text = text.trim_start();
    &text[..text.find(|c: char| !is_ident(c)).unwrap_or(text.len())]
}

/// The top-level modules a source names through `crate::` paths: `crate::x::…` and each item
/// of a `use crate::{x, y::z}` group (comments dropped).
fn crate_modules(source: &str) -> std::collections::BTreeSet<String> {
    let code: String = source.lines().map(code_of).collect::<Vec<_>>().join("\n");
    let mut found = std::collections::BTreeSet::new();
    for (at, word) in code.match_indices("crate::") {
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = &code[at + word.len()..];
        let Some(group) = rest.trim_start().strip_prefix('{') else {
            found.insert(leading_ident(rest).to_owned());
            continue;
        };
        // The group's items at its own depth, up to its closing brace.
        let mut depth = 0usize;
        let mut start = 0usize;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' | ',' if depth == 0 => {
                    found.insert(leading_ident(&group[start..i]).to_owned());
                    start = i + 1;
                    if c == '}' {
                        break;
                    }
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
    }
    found.retain(|m| !m.is_empty() && m != "self");
    found
}

type Graph = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;

/// The daemon's module graph: each top-level module of `fsd/src` and the others it names.
fn daemon_graph(sources: &[(String, String)]) -> Graph {
    let mut graph = Graph::new();
    for (rel, source) in sources {
        let Some(module) = daemon_module(rel) else { continue };
        let names = graph.entry(module.to_owned()).or_default();
        names.extend(crate_modules(source).into_iter().filter(|m| m != module));
    }
    graph
}

/// The modules on a circle of `graph`: those that reach themselves.
fn on_a_circle(graph: &Graph) -> Vec<String> {
    let reaches_itself = |start: &String| {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack: Vec<&String> = graph.get(start).into_iter().flatten().collect();
        while let Some(module) = stack.pop() {
            if module == start {
                return true;
            }
            if seen.insert(module) {
                stack.extend(graph.get(module).into_iter().flatten());
            }
        }
        false
    };
    graph.keys().filter(|m| reaches_itself(m)).cloned().collect()
}

/// The daemon sources outside `backend` that name it: what runs the code that touches the disk,
/// each with its reason. The network process's own modules (`service`, `rest`, `edge`,
/// `network`, the stream readers of `dispatch`) are not among them.
const BACKEND_USERS: &[(&str, &str)] = &[
    ("fsd/src/daemon.rs", "the start errors of the backend a child opens"),
    ("fsd/src/dispatch/direct.rs", "the direct read threads run the workers' `Backend` for plain reads"),
    (
        "fsd/src/dispatch/inline.rs",
        "the runtime threads run the same `Backend` for plain reads, where they may",
    ),
    ("fsd/src/role_confinement.rs", "the state directories the backend writes, which a worker is granted"),
    ("fsd/src/supervisor.rs", "recovery at start: the journal's sweep and the intent records"),
    ("fsd/src/worker.rs", "the worker runs every call through the backend"),
];

#[test]
fn only_what_runs_the_backend_imports_it() {
    let root = workspace_root();
    let mut users: Vec<String> = sources(&root.join(DAEMON))
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
            let inside = rel.starts_with("fsd/src/backend/");
            let names = crate_modules(&std::fs::read_to_string(&path).unwrap()).contains("backend");
            (names && !inside).then_some(rel)
        })
        .collect();
    users.sort();
    let expected: Vec<&str> = BACKEND_USERS.iter().map(|(file, _)| *file).collect();
    assert_eq!(users, expected, "a new importer of `crate::backend` needs its reason in BACKEND_USERS");
}

#[test]
fn the_daemon_modules_import_no_circle_and_the_vocabulary_imports_nothing() {
    let root = workspace_root();
    let sources: Vec<(String, String)> = sources(&root.join(DAEMON))
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
            (rel, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    let graph = daemon_graph(&sources);
    assert!(graph.len() > 20 && graph.contains_key(VOCABULARY), "the walk found too few modules: {graph:?}");
    assert_eq!(on_a_circle(&graph), Vec::<String>::new(), "{graph:#?}");
    assert_eq!(graph[VOCABULARY], Default::default(), "`{VOCABULARY}` imports nothing of the daemon");
    // Planted: paths, groups (nested, over lines), comments and the crate roots.
    let planted = |files: &[(&str, &str)]| {
        daemon_graph(&files.iter().map(|(r, s)| ((*r).to_owned(), (*s).to_owned())).collect::<Vec<_>>())
    };
    let graph = planted(&[
        ("fsd/src/op/mod.rs", "//! X.\n// crate::backend in a comment\nfn f(_: fsd_crate::x::Y) {}\n"),
        (
            "fsd/src/backend/mod.rs",
            "//! X.\nuse crate::{\n    op::{Mode, Request},\n    sys::{self, Meta}, error,\n};\n",
        ),
        ("fsd/src/sys/mod.rs", "//! X.\nconst P: &str = crate::op::TEMP_PREFIX;\n"),
        ("fsd/src/error.rs", "//! X.\nuse crate::backend::Failure;\nuse crate::error::Other;\n"),
        ("fsd/src/main.rs", "//! X.\nuse crate::backend;\n"),
    ]);
    let names = |m: &str| graph[m].iter().map(String::as_str).collect::<Vec<_>>();
    assert_eq!(names("op"), Vec::<&str>::new());
    assert_eq!(names("backend"), ["error", "op", "sys"]);
    assert_eq!(names("error"), ["backend"]);
    assert!(!graph.contains_key("main"));
    assert_eq!(on_a_circle(&graph), ["backend", "error"]);
}
