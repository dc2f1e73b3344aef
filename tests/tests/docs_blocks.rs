//! Every shell and config block of README.md and docs/*.md is run or parsed here, so what a
//! reader copies cannot rot.
//!
//! Parsed, every block by its kind: `sh` by `bash -n` (each command line of `fsd`, `fsd-tools` or
//! `fsd-approver` by that binary's own parser, and each `deploy/`, `scripts/` or `proto/` path it
//! names must exist); `toml` by the parser of what it configures (the daemon's
//! `ConfigFile`, the client's `ClientConfig`, a fleet file, an escalation rule file, or a Codex
//! `config.toml` whose fsd command line `fsd-tools` accepts); `json` by serde_json; `python` by
//! the interpreter's compiler. A block without a kind fails; `text` blocks (synopses, output)
//! are neither shell nor config.
//!
//! Run: the README's marked blocks (`<!-- test: NAME -->`), in the tests below: set-up command 1's
//! read (command 1's build and command 2 are too big to run inside the suite, so they are only
//! parsed), the MCP recipe's server, the REST recipe, and the Python recipe's stub generation
//! and script. The systemd and container recipes cannot run here (no systemd as PID 1, no
//! container runtime): they are checked against the unit, the config and the Dockerfile they
//! install. Blocks of the guides marked for their own tests are run there: docs/agents.md by
//! `docs_agents.rs`, docs/agent-sandbox.md by `docs_agent_sandbox.rs`, docs/grpc-clients.md by
//! `grpc_clients.rs`. The inventory test prints which block is run and which parsed.
//!
//! docs/config.md's tables are checked against the config types both ways, with the keys and
//! their kinds read from the types through serde; and each default the tables give as a value
//! (not in words) is the real one: setting a key to it changes nothing.
//!
//! And every relative link of README.md, docs/*.md and deploy/README.md reaches its file and,
//! with a `#anchor`, a heading of it: the reference moved out of the README, so its links must
//! follow.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::de::{self, DeserializeOwned, Deserializer, IntoDeserializer, MapAccess, Visitor};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// One fenced block of a document.
struct Block {
    doc: String,
    /// 1-based line of the opening fence.
    line: usize,
    lang: String,
    /// `(kind, name)` of a `<!-- KIND: NAME -->` line right above the fence.
    marker: Option<(String, String)>,
    body: String,
}

/// Every fenced block of `text` (indented ones in list items included).
fn blocks(doc: &str, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].trim_start().strip_prefix("```") else {
            i += 1;
            continue;
        };
        let indent = lines[i].len() - lines[i].trim_start().len();
        let marker = i
            .checked_sub(1)
            .and_then(|above| lines[above].trim().strip_prefix("<!-- ")?.strip_suffix(" -->"))
            .and_then(|m| m.split_once(": "))
            .map(|(kind, name)| (kind.to_owned(), name.to_owned()));
        let start = i;
        i += 1;
        let mut body = Vec::new();
        while i < lines.len() && lines[i].trim() != "```" {
            body.push(lines[i].get(indent..).unwrap_or(lines[i].trim_start()));
            i += 1;
        }
        assert!(i < lines.len(), "{doc}:{}: the block never ends", start + 1);
        out.push(Block {
            doc: doc.to_owned(),
            line: start + 1,
            lang: info.trim().to_owned(),
            marker,
            body: body.join("\n"),
        });
        i += 1;
    }
    out
}

/// README.md and every docs/*.md, by name.
fn documents() -> Vec<(String, String)> {
    let mut names = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    docs.sort();
    names.extend(docs);
    names.into_iter().map(|n| (n.clone(), read(&n))).collect()
}

/// Which test runs or checks the marked blocks of a document, by marker kind.
const RUNNERS: &[(&str, &str, &str)] = &[
    ("README.md", "test", "tests/tests/docs_blocks.rs"),
    ("docs/agents.md", "file", "tests/tests/docs_agents.rs"),
    ("docs/agent-sandbox.md", "test", "tests/tests/docs_agent_sandbox.rs"),
    ("docs/grpc-clients.md", "example", "tests/tests/grpc_clients.rs"),
    ("docs/escalation.md", "test", "tests/tests/approver_recipe.rs"),
];

/// What the tests below do with each marked block of the README, beyond parsing it.
const README_BLOCKS: &[(&str, &str)] = &[
    ("claude.sh", "runs the MCP server it registers"),
    ("codex.toml", "runs the MCP server it registers"),
    ("container.sh", "checks it against deploy/container (no container runtime here)"),
    ("hello.py", "runs it against a daemon"),
    ("python.sh", "runs its stub step"),
    ("rest.sh", "runs it"),
    ("settings.json", "checks that the host's file tools are denied"),
    ("setup.sh", "runs command 1's read; command 1's build and command 2 are only parsed"),
    ("systemd.sh", "checks it against deploy/systemd (no systemd here)"),
];

fn python() -> PathBuf {
    common::rest::python()
}

/// `bash -n`: the block is shell the reader's bash accepts.
fn bash_parses(block: &Block) -> usize {
    let mut child =
        Command::new("bash").arg("-n").stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(block.body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}:{}: bash -n: {}",
        block.doc,
        block.line,
        String::from_utf8_lossy(&out.stderr)
    );
    let checked = commands(&block.body).iter().filter(|command| binary_accepts(block, command)).count();
    for word in block.body.split(|c: char| c.is_whitespace() || "'\"=".contains(c)) {
        if ["deploy/", "scripts/", "proto/"].iter().any(|p| word.starts_with(p)) {
            assert!(
                repo().join(word).exists(),
                "{}:{}: names {word}, which does not exist",
                block.doc,
                block.line
            );
        }
    }
    checked
}

/// What a TOML block configures, found by the parser that accepts it.
fn toml_kind(block: &Block) -> &'static str {
    let table: toml::Table =
        toml::from_str(&block.body).unwrap_or_else(|e| panic!("{}:{}: {e}", block.doc, block.line));
    if table.contains_key("mcp_servers") {
        let fsd = &table["mcp_servers"]["fsd"];
        assert_eq!(fsd["command"].as_str(), Some("fsd-tools"), "{}:{}", block.doc, block.line);
        let args: Vec<String> =
            fsd["args"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
        accepted(&args);
        return "a Codex config.toml";
    }
    if toml::from_str::<fsd::config::ConfigFile>(&block.body).is_ok() {
        return "the daemon's config";
    }
    if toml::from_str::<fsd_tool_client::config::ClientConfig>(&block.body).is_ok() {
        return "the client's config";
    }
    if table.contains_key("web") || table.contains_key("person") || table.contains_key("daemon") {
        if let Err(e) = fsd_approver::config_parses(&block.body) {
            panic!("{}:{}: not an approver config: {e}", block.doc, block.line);
        }
        return "the approver's config";
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("block.toml");
    std::fs::write(&path, &block.body).unwrap();
    if fsd_tool_client::fleet::Fleet::load(Some(&path)).is_ok() {
        return "a fleet file";
    }
    match fsd_tool_client::local_approver::Approver::from_config(Some(&path), false) {
        Ok(_) => "an escalation rule file",
        Err(e) => panic!(
            "{}:{}: no config parser accepts this block (as a rule file: {e}):\n{}",
            block.doc, block.line, block.body
        ),
    }
}

/// Runs `program` in the tests' Python with the block on its standard input; fails the test with
/// Python's error unless it exits 0.
fn python_accepts(block: &Block, program: &str) {
    let out = Command::new(python())
        .args(["-c", program])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(block.body.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(out.status.success(), "{}:{}: {}", block.doc, block.line, String::from_utf8_lossy(&out.stderr));
}

/// Parses `block` as its kind and says what it is.
fn parse(block: &Block) -> String {
    match block.lang.as_str() {
        "sh" => {
            let checked = bash_parses(block);
            format!("parsed as shell (bash -n; {checked} command lines of fsd binaries parsed by them)")
        }
        "toml" => format!("parsed as {}", toml_kind(block)),
        "json" => {
            serde_json::from_str::<Value>(&block.body)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", block.doc, block.line));
            "parsed as JSON".to_owned()
        }
        "python" => {
            python_accepts(block, "import sys; compile(sys.stdin.read(), 'block', 'exec')");
            "parsed as Python (compiled)".to_owned()
        }
        "yaml" => {
            // PyYAML comes with kubernetes-validate, which `scripts/test.sh` installs.
            python_accepts(block, "import sys, yaml; list(yaml.safe_load_all(sys.stdin))");
            "parsed as YAML".to_owned()
        }
        "text" => "not parsed: text, neither shell nor config".to_owned(),
        other => panic!(
            "{}:{}: a block of kind {other:?}: give it sh, toml, json, python, yaml or text",
            block.doc, block.line
        ),
    }
}

#[test]
fn every_block_of_the_readme_and_the_docs_is_run_or_parsed() {
    let mut report = Vec::new();
    for (doc, text) in documents() {
        for block in blocks(&doc, &text) {
            let parsed = parse(&block);
            let runner = block.marker.as_ref().map(|(kind, name)| {
                let (_, _, test) = RUNNERS
                    .iter()
                    .find(|(d, k, _)| *d == doc && k == kind)
                    .unwrap_or_else(|| panic!("{doc}:{}: no test runs <!-- {kind}: --> blocks", block.line));
                assert!(read(test).contains(&doc), "{test} does not read {doc}");
                match README_BLOCKS.iter().find(|(n, _)| doc == "README.md" && n == name) {
                    Some((_, what)) => format!("[{name}] {test} {what}"),
                    None => format!("[{name}] run by {test}"),
                }
            });
            report.push(format!(
                "{doc}:{} {}: {parsed}{}",
                block.line,
                block.lang,
                runner.map(|r| format!("; {r}")).unwrap_or_default()
            ));
        }
    }
    // The README's recipes are all marked, and each one is run or checked below.
    let marked = common::docs::marked_blocks(&read("README.md"), "test");
    assert_eq!(
        marked.keys().map(String::as_str).collect::<Vec<_>>(),
        README_BLOCKS.iter().map(|(n, _)| *n).collect::<Vec<_>>()
    );
    println!("{}", report.join("\n"));
}

/// The README's block marked `name`.
fn readme_block(name: &str) -> String {
    let found = common::docs::marked_blocks(&read("README.md"), "test");
    found.get(name).unwrap_or_else(|| panic!("README.md has no <!-- test: {name} --> block")).clone()
}

/// Shell words of one line: single and double quotes, no expansion.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut quote = None;
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => out.extend(word.take()),
            (_, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    out
}

/// The simple commands of a shell text: lines joined at `\`, split at unquoted `|`, `;` and `&`,
/// comments dropped, each as its words.
fn commands(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in text.replace("\\\n", " ").lines() {
        let mut current = String::new();
        let mut quote = None;
        for c in line.chars() {
            match (quote, c) {
                (None, '\'' | '"') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '#') if current.is_empty() || current.ends_with(char::is_whitespace) => break,
                (None, '|' | ';' | '&') => {
                    out.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        out.push(current);
    }
    out.iter().map(|c| words(c)).filter(|w| !w.is_empty()).collect()
}

/// A command line of fsd, fsd-tools or fsd-approver (after `sudo`, `sudo -u USER`, variable
/// assignments and a `target/release/` prefix) is one the binary's parser accepts: run with
/// `--help` appended, which it answers only when every argument before it parsed.
fn binary_accepts(block: &Block, command: &[String]) -> bool {
    let mut words = command.iter().map(String::as_str).peekable();
    while let Some(&word) = words.peek() {
        match word {
            "sudo" => {
                words.next();
                if words.peek() == Some(&"-u") {
                    words.nth(1);
                }
            }
            w if w.contains('=') && !w.starts_with('-') => {
                words.next();
            }
            _ => break,
        }
    }
    let Some(program) = words.next() else { return false };
    let name = program.strip_prefix("target/release/").unwrap_or(program);
    if !["fsd", "fsd-tools", "fsd-approver"].contains(&name) {
        return false;
    }
    let mut args = Vec::new();
    while let Some(word) = words.next() {
        // Redirections are the shell's: `> FILE`, `2>&1`, `<<'EOF'`.
        if word.starts_with('>') || word.starts_with('<') || word.starts_with("2>") {
            if matches!(word, ">" | ">>" | "<" | "2>") {
                words.next();
            }
            continue;
        }
        args.push(word);
    }
    let out = Command::new(common::bin_dir().join(name))
        .args(&args)
        .arg("--help")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}:{}: `{name} {}` is not a command line {name} accepts: {}",
        block.doc,
        block.line,
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// Runs `fsd-tools ARGS` (stdin closed) and insists it got past argument parsing.
fn accepted(args: &[String]) {
    let out = Command::new(common::tools_bin()).args(args).stdin(Stdio::null()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("Usage:") && !stderr.contains("unexpected argument"), "{args:?}: {stderr}");
    assert!(stderr.starts_with("fsd-tools: "), "{args:?} failed for a reason of its own: {stderr}");
}

#[test]
fn set_up_command_1_reads_the_readme_through_a_private_daemon() {
    let block = readme_block("setup.sh");
    assert!(block.contains("cargo build --release --locked -p fsd -p fsd-tool-client -p fsd-approver\n"));
    assert!(block.lines().any(|l| l == "bash scripts/test.sh"), "set-up command 2");
    let line = block.lines().find(|l| l.starts_with("target/release/fsd-tools ")).expect("the read line");
    // The suite's build stands in for the release build command 1 makes.
    let args = words(line);
    let out = Command::new(common::tools_bin()).args(&args[1..]).current_dir(repo()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{line}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("1: # fsd — a confined file layer for LLM agents"), "{stdout}");
    assert!(stdout.contains("(Showing lines 1-5 of "), "{stdout}");
}

/// An MCP server on stdio: initialize, the tool list, a write and a read of `notes.txt`.
fn mcp_round_trip(args: &[String], workspace: &Path) {
    let mut child = Command::new(common::tools_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut call = |message: Value| -> Value {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        if message.get("id").is_none() {
            return Value::Null;
        }
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    let init = call(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "readme", "version": "1"}}}));
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    call(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let list = call(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let names: Vec<&str> =
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["read", "write", "edit"], "{list}");
    let tool = |id: u64, name: &str, arguments: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    let wrote = call(tool(2, "write", json!({"file_path": "notes.txt", "content": "alpha\n"})));
    assert_ne!(wrote["result"]["isError"], json!(true), "{wrote}");
    let read = call(tool(3, "read", json!({"file_path": "notes.txt"})));
    assert!(read["result"]["content"][0]["text"].as_str().unwrap_or_default().contains("1: alpha"), "{read}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "alpha\n");
}

#[test]
fn the_mcp_host_recipe_registers_a_server_that_serves_and_turns_the_host_tools_off() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(dir.path()).unwrap();
    // `claude mcp add NAME -- COMMAND...`: the command after `--`, with the project for $PWD.
    let line = readme_block("claude.sh");
    let args = words(&line);
    assert_eq!(&args[..5], ["claude", "mcp", "add", "fsd", "--"]);
    assert_eq!(args[5], "fsd-tools");
    let server: Vec<String> =
        args[6..].iter().map(|a| a.replace("$PWD", &workspace.display().to_string())).collect();
    mcp_round_trip(&server, &workspace);

    let settings: Value = serde_json::from_str(&readme_block("settings.json")).unwrap();
    let list = |key: &str| -> Vec<String> {
        settings["permissions"][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    for tool in ["Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "Bash"] {
        assert!(list("deny").iter().any(|d| d == tool), "Claude Code's {tool} must be denied");
    }
    for tool in ["read", "write", "edit"] {
        assert!(list("allow").contains(&format!("mcp__fsd__{tool}")));
    }

    let codex: toml::Table = toml::from_str(&readme_block("codex.toml")).unwrap();
    assert_eq!(codex["sandbox_mode"].as_str(), Some("read-only"), "Codex's own writes are fenced off");
    assert_eq!(codex["approval_policy"].as_str(), Some("never"), "and it cannot ask its way out");
    let fsd = &codex["mcp_servers"]["fsd"];
    assert_eq!(fsd["command"].as_str(), Some("fsd-tools"));
    let args: Vec<String> =
        fsd["args"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    let args: Vec<String> =
        args.iter().map(|a| a.replace("/path/to/project", &workspace.display().to_string())).collect();
    std::fs::remove_file(workspace.join("notes.txt")).unwrap();
    mcp_round_trip(&args, &workspace);
}

#[test]
fn the_systemd_recipe_installs_what_the_unit_and_its_config_name() {
    let block = readme_block("systemd.sh");
    let unit = read("deploy/systemd/fsd.service");
    let config =
        fsd::config::Config::load(Some(&repo().join("deploy/systemd/fsd.toml")), Default::default()).unwrap();
    let unit_value = |key: &str| -> String {
        unit.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("the unit has no {key}"))
            .to_owned()
    };
    // The user the unit runs as is the one the recipe makes; the binary and config are where
    // ExecStart looks; the workspace the recipe makes is the config's root and writable by the unit.
    assert!(block.contains(&format!(
        "useradd --system --user-group --no-create-home --shell /usr/sbin/nologin {}\n",
        unit_value("User=")
    )));
    let exec = unit_value("ExecStart=");
    let exec = words(&exec);
    let install = block.lines().find(|l| l.starts_with("sudo install -m 0755 ")).expect("the binaries' line");
    assert!(install.contains(" target/release/fsd ") && install.ends_with(" /usr/local/bin/"), "{install}");
    assert_eq!(exec[0], "/usr/local/bin/fsd");
    let config_at = &exec[exec.iter().position(|a| a == "--config").unwrap() + 1];
    assert!(block.contains(&format!("deploy/systemd/fsd.toml {config_at}\n")), "{config_at}");
    assert!(block.contains("deploy/systemd/fsd.service /etc/systemd/system/fsd.service\n"));
    let root = &config.roots[0];
    assert!(root.writable);
    let root_path = root.path.display().to_string();
    assert!(block.contains(&format!("install -d -o fsd -g fsd {root_path}\n")));
    assert_eq!(unit_value("ReadWritePaths="), root_path);
    // The socket the recipe asks doctor about is the one the config listens on.
    let socket = config.listen.iter().map(ToString::to_string).find(|l| l.starts_with("unix:")).unwrap();
    assert!(block.lines().any(|l| l == format!("sudo fsd-tools doctor {socket}")), "{socket}");
    accepted(&["doctor".to_owned(), socket]);
}

#[test]
fn the_container_recipe_matches_the_dockerfile() {
    let block = readme_block("container.sh");
    let dockerfile = read("deploy/container/Dockerfile");
    assert!(dockerfile.contains("docker build -f deploy/container/Dockerfile -t fsd ."));
    assert!(block.contains("docker build -f deploy/container/Dockerfile -t fsd .\n"));
    // The workspace volume belongs to the image's user, so the workers can write it.
    let user = dockerfile.lines().find_map(|l| l.strip_prefix("USER ")).expect("a USER line");
    assert!(block.contains(&format!("chown {user} work")), "{user}");
    assert!(dockerfile.contains(r#"VOLUME ["/workspace", "/run/fsd"]"#));
    let config =
        fsd::config::Config::load(Some(&repo().join("deploy/container/fsd.toml")), Default::default())
            .unwrap();
    let socket = config.listen.iter().map(ToString::to_string).find(|l| l.starts_with("unix:")).unwrap();
    assert!(dockerfile.contains("/src/target/release/fsd-tools /usr/local/bin/"));
    // The client container's command line, after the image name, is one fsd-tools accepts.
    let client = block.lines().find(|l| l.contains("--entrypoint fsd-tools")).expect("the client line");
    let args = words(client);
    let at = args.iter().position(|a| a == "fsd-tools").unwrap() + 2;
    assert_eq!(args[at..][..3], ["mcp", "--endpoint", socket.as_str()]);
    accepted(&args[at..]);
}

#[test]
fn the_rest_recipe_works_as_written() {
    let block = readme_block("rest.sh");
    let dir = tempfile::tempdir().unwrap();
    // Not made here: the recipe makes its workspace (before, it named one that did not exist).
    let workspace = std::fs::canonicalize(dir.path()).unwrap().join("workspace");
    let port = common::rest::free_port();
    let block = block
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
        .replace("/workspace", &workspace.display().to_string());
    // The daemon's line runs through the kit (which waits for the port instead of `sleep 1` and
    // stops it instead of `kill`); every other line runs in bash as written, in order.
    let (before, rest) = block.split_once("\nfsd ").expect("the fsd line");
    let (fsd_line, after) = rest.split_once('\n').unwrap();
    let fsd_args = words(fsd_line.strip_suffix(" & fsd=$!").expect("fsd runs in the background"));
    let after = after.strip_prefix("sleep 1\n").expect("the recipe waits for the daemon");
    let after = after.strip_suffix("\nkill \"$fsd\"").expect("the recipe stops the daemon");
    let bash = |script: &str| {
        let mut path = common::bin_dir().into_os_string();
        path.push(":");
        path.push(std::env::var_os("PATH").unwrap_or_default());
        let out = Command::new("bash")
            .args(["-e", "-c", script])
            .current_dir(dir.path())
            .env("PATH", path)
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success(), "{script}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        stdout
    };
    bash(before);
    let args: Vec<String> = fsd_args
        .iter()
        .map(|a| if a == "fsd.toml" { dir.path().join(a).display().to_string() } else { a.clone() })
        .collect();
    let mut daemon = common::launch()
        .args(&args)
        .awaits(fsd_testkit::Listener::Tcp(format!("127.0.0.1:{port}")))
        .start()
        .unwrap_or_else(|e| panic!("{e}"));
    let out = bash(after);
    assert!(out.contains("HTTP/1.1 204"), "{out}");
    assert!(out.to_ascii_lowercase().contains("etag: \""), "{out}");
    assert!(out.contains("\"name\":\"main.py\""), "{out}");
    assert!(out.contains("1: print(\"hi\")"), "{out}");
    assert_eq!(std::fs::read_to_string(workspace.join("src/main.py")).unwrap(), "print(\"hi\")\n");
    assert!(daemon.terminate().unwrap().success());
}

#[test]
fn the_python_recipe_makes_stubs_and_reads_through_the_unix_socket() {
    let python = python();
    let steps = readme_block("python.sh");
    let protoc = "-m grpc_tools.protoc -I proto --python_out gen --grpc_python_out gen fsd/v1/fsd.proto";
    assert!(steps.contains(&format!("mkdir -p gen && .venv/bin/python {protoc}\n")));
    assert!(steps.contains("PYTHONPATH=gen .venv/bin/python hello.py /run/fsd/fsd.sock"));
    let work = tempfile::tempdir().unwrap();
    let gen_dir = work.path().join("gen");
    std::fs::create_dir(&gen_dir).unwrap();
    // The recipe's stub step with the suite's venv, in a directory that has the repository's proto/.
    std::os::unix::fs::symlink(repo().join("proto"), work.path().join("proto")).unwrap();
    let status = Command::new(&python).args(protoc.split(' ')).current_dir(work.path()).status().unwrap();
    assert!(status.success(), "protoc via grpcio-tools failed");
    let daemon = common::Daemon::start();
    std::fs::write(daemon.root.join("notes.txt"), "from the workspace\n").unwrap();
    let script = work.path().join("hello.py");
    std::fs::write(&script, readme_block("hello.py")).unwrap();
    let out = Command::new(&python)
        .arg(&script)
        .arg(&daemon.socket)
        .env("PYTHONPATH", &gen_dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        stdout,
        format!("fsd {} serves {}\nfrom the workspace\n", env!("CARGO_PKG_VERSION"), daemon.root.display())
    );
}

// ---- docs/config.md against the config types ----

/// What serde reads for one key: its kind as the table names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Boolean,
    Integer,
    Number,
    Text,
    Array,
    Table,
    /// One of several kinds (an untagged enum, read with `deserialize_any`): the table names them.
    Either,
}

/// A deserializer that records the first kind of value asked of it, then refuses: the keys of a
/// struct (`deserialize_struct`'s field list) and each key's kind, read from the type itself.
struct Probe<'a> {
    fields: &'a mut Option<&'static [&'static str]>,
    kind: &'a mut Option<Kind>,
}

fn stop<V>(kind: &mut Option<Kind>, found: Kind) -> Result<V, de::value::Error> {
    *kind = Some(found);
    Err(de::Error::custom("probed"))
}

macro_rules! probe_as {
    ($($method:ident => $kind:ident),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            stop(self.kind, Kind::$kind)
        }
    )*};
}

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = de::value::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.fields = Some(fields);
        stop(self.kind, Kind::Table)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_some(self)
    }

    probe_as! {
        deserialize_bool => Boolean,
        deserialize_i8 => Integer, deserialize_i16 => Integer, deserialize_i32 => Integer,
        deserialize_i64 => Integer, deserialize_u8 => Integer, deserialize_u16 => Integer,
        deserialize_u32 => Integer, deserialize_u64 => Integer,
        deserialize_f32 => Number, deserialize_f64 => Number,
        deserialize_str => Text, deserialize_string => Text, deserialize_char => Text,
        deserialize_seq => Array, deserialize_map => Table,
    }

    serde::forward_to_deserialize_any! {
        i128 u128 bytes byte_buf unit unit_struct newtype_struct tuple tuple_struct enum identifier
        ignored_any
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        // An untagged enum asks for any value: the table must name its kinds with "or".
        self.kind.get_or_insert(Kind::Either);
        Err(de::Error::custom("a value of several kinds"))
    }
}

/// A map of one key whose value is a [`Probe`].
struct OneKey<'a> {
    key: Option<&'static str>,
    kind: &'a mut Option<Kind>,
}

impl<'de> MapAccess<'de> for OneKey<'_> {
    type Error = de::value::Error;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        self.key.take().map(|key| seed.deserialize(key.into_deserializer())).transpose()
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Self::Error> {
        seed.deserialize(Probe { fields: &mut None, kind: self.kind })
    }
}

/// A struct that is fed one key: `deserialize_map` hands the derived visitor that map.
struct Feed<'a>(OneKey<'a>);

impl<'de> Deserializer<'de> for Feed<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(self.0)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// The keys of `T` (as the file spells them) and the kind of each, read through serde.
fn keys_of<T: DeserializeOwned>() -> BTreeMap<&'static str, Kind> {
    let mut fields = None;
    let _ = T::deserialize(Probe { fields: &mut fields, kind: &mut None });
    let fields = fields.expect("a struct");
    fields
        .iter()
        .map(|&key| {
            let mut kind = None;
            let _ = T::deserialize(Feed(OneKey { key: Some(key), kind: &mut kind }));
            (key, kind.unwrap_or_else(|| panic!("no kind read for {key}")))
        })
        .collect()
}

/// The rows of the first table under `heading` in docs/config.md: key, then the other cells.
fn table_rows(doc: &str, heading: &str) -> BTreeMap<String, Vec<String>> {
    let section = doc.split_once(&format!("\n{heading}\n")).unwrap_or_else(|| panic!("no {heading}")).1;
    let section = section.split("\n## ").next().unwrap();
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_start_matches("| ").trim_end_matches(" |").split(" | ").collect();
        let key = cells[0].trim_matches('`').to_owned();
        let rest = cells[1..].iter().map(|c| (*c).to_owned()).collect();
        assert!(rows.insert(key.clone(), rest).is_none(), "{key} has two rows");
    }
    rows
}

/// Whether the table's type word names `kind`.
fn names_kind(word: &str, kind: Kind) -> bool {
    match kind {
        Kind::Boolean => word == "boolean",
        Kind::Integer => word == "integer",
        Kind::Number => word == "number",
        Kind::Text => word == "string" || word == "path",
        Kind::Array => word.starts_with("array of "),
        Kind::Either => word.contains(" or "),
        Kind::Table => word.starts_with("table"),
    }
}

/// Both ways: every key of the types has a row of the right type, and every row is a key.
fn same_keys(what: &str, rows: &BTreeMap<String, Vec<String>>, keys: &BTreeMap<String, Kind>) {
    for (key, kind) in keys {
        let row =
            &rows.get(key).unwrap_or_else(|| panic!("{what}: key {key} is missing from docs/config.md"))[0];
        assert!(
            names_kind(row, *kind),
            "{what}: docs/config.md gives {key} the type {row:?}, the type is {kind:?}"
        );
    }
    for key in rows.keys() {
        assert!(
            keys.contains_key(key),
            "{what}: docs/config.md lists {key}, which the config does not accept"
        );
    }
}

#[test]
fn the_config_reference_lists_every_key_of_the_config_types_and_no_other() {
    let doc = read("docs/config.md");
    // The daemon: top-level keys, and the sections' keys under their section's name.
    let mut keys: BTreeMap<String, Kind> = BTreeMap::new();
    for (key, kind) in keys_of::<fsd::config::ConfigFile>() {
        match key {
            "budgets" => keys.extend(
                keys_of::<fsd::config::BudgetsFile>().into_iter().map(|(k, v)| (format!("budgets.{k}"), v)),
            ),
            "tokens" => keys.extend(
                keys_of::<fsd::config::TokenFile>().into_iter().map(|(k, v)| (format!("tokens.NAME.{k}"), v)),
            ),
            _ => {
                keys.insert(key.to_owned(), kind);
            }
        }
    }
    assert!(keys.len() > 50, "{keys:?}");
    same_keys("the daemon", &table_rows(&doc, "## The daemon: `fsd --config fsd.toml`"), &keys);

    let client: BTreeMap<String, Kind> = keys_of::<fsd_tool_client::config::ClientConfig>()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    assert!(client.contains_key("applyPatch"), "{client:?}");
    same_keys("the client", &table_rows(&doc, "## The client: `fsd-tools --config client.toml`"), &client);
}

// ---- links ----

/// GitHub's anchor of a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a markdown file's headings (outside code blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_readme_and_the_docs_reaches_its_file_and_heading() {
    let mut checked = 0;
    let mut docs = documents();
    docs.push(("deploy/README.md".to_owned(), read("deploy/README.md")));
    for (doc, text) in docs {
        let base = repo().join(&doc).parent().unwrap().to_path_buf();
        for (at, _) in text.match_indices("](") {
            let target = text[at + 2..].split(')').next().unwrap();
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() { repo().join(&doc) } else { base.join(file) };
            assert!(path.exists(), "{doc}: link {target} reaches no file");
            if !anchor.is_empty() {
                let headings = anchors(&std::fs::read_to_string(&path).unwrap());
                assert!(
                    headings.iter().any(|h| h == anchor),
                    "{doc}: link {target}: no such heading in {headings:?}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 40, "{checked} links");
}

/// A default cell as a TOML value: a literal in backticks, or a size in MiB or GiB. Anything
/// else (none, or a default that depends on other settings) is said in words and not checked.
fn default_value(cell: &str) -> Option<String> {
    if let Some(literal) = cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')) {
        return (!literal.contains('`')).then(|| literal.to_owned());
    }
    let (number, unit) = cell.split_once(' ')?;
    let shift = match unit {
        "MiB" => 20,
        "GiB" => 30,
        _ => return None,
    };
    Some((number.parse::<u64>().ok()? << shift).to_string())
}

#[test]
fn the_config_reference_gives_the_daemons_defaults() {
    let doc = read("docs/config.md");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let path = dir.path().join("fsd.toml");
    let socket = dir.path().join("fsd.sock");
    // Setting a key to its documented default must leave the resolved config as no setting does.
    let load = |body: &str| {
        std::fs::write(&path, body).unwrap();
        let flags = fsd::config::Overrides {
            listen: vec![format!("unix:{}", socket.display())],
            writable_roots: vec![root.clone()],
            ..Default::default()
        };
        let config = fsd::config::Config::load(Some(&path), flags).unwrap_or_else(|e| panic!("{body}: {e}"));
        format!("{config:?}")
    };
    let unset = load("");
    let mut checked = 0;
    for (key, cells) in table_rows(&doc, "## The daemon: `fsd --config fsd.toml`") {
        let Some(value) = default_value(&cells[1]) else { continue };
        let body = format!("{key} = {value}\n");
        assert!(load(&body) == unset, "docs/config.md gives {key} the default {}, which it is not", cells[1]);
        checked += 1;
    }
    assert!(checked > 35, "{checked} defaults checked");
}

#[test]
fn the_config_reference_gives_the_clients_defaults() {
    let doc = read("docs/config.md");
    let unset = format!("{:?}", fsd_tool_client::config::ClientConfig::default());
    let mut checked = 0;
    for (key, cells) in table_rows(&doc, "## The client: `fsd-tools --config client.toml`") {
        let Some(value) = default_value(&cells[1]) else { continue };
        // A key the type leaves unset (None) takes its default where it is used: not comparable here.
        let snake: String = key
            .chars()
            .flat_map(|c| if c.is_ascii_uppercase() { vec!['_', c.to_ascii_lowercase()] } else { vec![c] })
            .collect();
        if unset.contains(&format!("{snake}: None")) {
            continue;
        }
        let body = format!("{key} = {value}\n");
        let set: fsd_tool_client::config::ClientConfig =
            toml::from_str(&body).unwrap_or_else(|e| panic!("{body}: {e}"));
        assert!(
            format!("{set:?}") == unset,
            "docs/config.md gives {key} the default {}, which it is not",
            cells[1]
        );
        checked += 1;
    }
    assert!(checked > 10, "{checked} defaults checked");
}
