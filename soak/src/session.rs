//! A real `fsd-tools session` process (the JSON-lines face): one owner of observations, one
//! connection to the daemon, driven one call at a time.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::daemon::Bins;
use crate::util::{Error, Result};

/// One result line of a session.
#[derive(Debug, Clone)]
pub struct Reply {
    pub json: Value,
}

impl Reply {
    pub fn is_error(&self) -> bool {
        self.json["is_error"].as_bool().unwrap_or(true)
    }

    pub fn code(&self) -> Option<&str> {
        self.json["code"].as_str()
    }

    pub fn text(&self) -> &str {
        self.json["text"].as_str().unwrap_or("")
    }
}

#[derive(Debug)]
pub struct ToolSession {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl ToolSession {
    /// Starts `fsd-tools session --endpoint unix:SOCKET --cwd CWD [--config FILE]`.
    pub fn start(bins: &Bins, socket: &Path, cwd: &Path, config: Option<&Path>) -> Result<ToolSession> {
        let mut command = Command::new(&bins.tools);
        command
            .arg("session")
            .arg("--endpoint")
            .arg(format!("unix:{}", socket.display()))
            .arg("--cwd")
            .arg(cwd);
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        let mut child =
            command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("fsd-tools session has no stdout")?;
        Ok(ToolSession { child, stdin, stdout: BufReader::new(stdout), next_id: 0 })
    }

    /// Calls a tool and reads its reply.
    pub fn call(&mut self, tool: &str, args: Value) -> Result<Reply> {
        self.next_id += 1;
        let line = json!({"id": self.next_id, "tool": tool, "args": args}).to_string();
        let stdin = self.stdin.as_mut().ok_or("session closed")?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        let mut out = String::new();
        if self.stdout.read_line(&mut out)? == 0 {
            return Err(Error("fsd-tools session closed its output".into()));
        }
        let json: Value =
            serde_json::from_str(&out).map_err(|e| Error(format!("reply is not JSON ({e}): {out}")))?;
        if json["id"] != json!(self.next_id) {
            return Err(Error(format!("reply out of order: {out}")));
        }
        Ok(Reply { json })
    }
}

impl Drop for ToolSession {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The numbered lines of a read tool envelope (`N: text`), without their numbers.
pub fn read_lines(text: &str) -> Vec<&str> {
    let Some(start) = text.find("<content>\n") else { return Vec::new() };
    text[start + "<content>\n".len()..]
        .lines()
        .map_while(|l| l.split_once(": ").filter(|(n, _)| n.parse::<u64>().is_ok()).map(|(_, t)| t))
        .collect()
}
