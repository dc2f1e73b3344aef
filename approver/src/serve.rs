//! `fsd-approver serve`: the approver as a small gRPC service (fsd.approver.v1) that daemons
//! ask, so the private key can live on another host or under another user than the agents.
//! This process, the keeper, holds the key and parses no HTTP; the front ([`crate::front`], a
//! process of its own) serves the daemons, the page and the webhook and asks the keeper. Every
//! request of every daemon waits in one queue, in arrival order, until a person decides it (on
//! the page, or at this terminal) or it expires; a rule file instead decides each at once. Every
//! decision, expiry and withdrawal is one JSON line in the decision log: a hash chain whose
//! checkpoints this key signs ([`fsd_proto::chain`]), every `--checkpoint-every` decisions and
//! at exit.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ed25519_dalek::SigningKey;
use fsd_proto::approver::Decider;
use fsd_proto::chain::{CheckpointKind, LogKind, Writer};

use crate::config::Config;
use crate::link::{Entry, Reply, Summary, ToFront, ToKeeper, key_of};
use crate::{ApproverError, Decision, Rules, ask, explain, signature};

/// How the Unix socket is made available to the daemon.
#[derive(Debug, Clone)]
pub struct Socket {
    pub mode: u32,
    pub gid: Option<u32>,
    /// `--socket-group` as the user typed it (a name or a number): errors name what they typed.
    pub group: Option<String>,
}

impl Socket {
    pub fn parse(mode: &str, group: Option<&str>) -> Result<Socket, ApproverError> {
        let bad_mode = || ApproverError::SocketMode(mode.to_owned());
        let parsed = u32::from_str_radix(mode.trim_start_matches("0o"), 8).map_err(|_| bad_mode())?;
        if parsed > 0o777 {
            return Err(bad_mode());
        }
        let gid = match group {
            None => None,
            Some(g) => Some(match g.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => group_id(g).ok_or_else(|| ApproverError::SocketGroup(g.to_owned()))?,
            }),
        };
        Ok(Socket { mode: parsed, gid, group: group.map(str::to_owned) })
    }
}

/// A group's id from /etc/group (`name:x:gid:members`).
fn group_id(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next() == Some(name)).then(|| fields.nth(1)?.parse().ok()).flatten()
    })
}

#[derive(Debug)]
pub struct Options {
    pub key: SigningKey,
    pub listen: String,
    /// The rule file's path (which decisions name) and its rules.
    pub rules: Option<(PathBuf, Rules)>,
    pub socket: Socket,
    pub log: Option<PathBuf>,
    pub checkpoint_every: u64,
    pub config: Config,
    /// Whether the person at this terminal decides what waits (no rule file, a terminal).
    pub terminal: bool,
}

/// One decision as the log keeps it.
#[derive(Debug, serde::Serialize)]
struct Logged<'a> {
    time: String,
    digest: String,
    id: &'a str,
    mode: &'a str,
    /// The sandbox whose daemon asked (its `[[daemon]]` name; empty when none is configured).
    sandbox: &'a str,
    /// `approved`, `refused`, `expired` (nobody decided in time) or `withdrawn` (the daemon
    /// stopped waiting before its expiry).
    decision: &'a str,
    /// `person`, `rules`, or `nobody` for an expiry or a withdrawal.
    by: &'a str,
    /// Who decided, as the signature names it: `person` (the terminal), `person NAME` (the
    /// page), or `rules FILE: rule N`.
    decider: &'a str,
    reason: &'a str,
}

/// Who decided, when the person at this terminal did.
const PERSON: &str = "person";

/// Who decided, when the rule file did: the file and the rules (or the rule that refused).
fn rules_decider(path: &Path, why: &str) -> String {
    format!("rules {}: {why}", path.display())
}

fn field<'a>(description: &'a str, name: &str) -> &'a str {
    description.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("")
}

/// A request waiting for a person.
#[derive(Debug)]
struct Waiting {
    entry: Entry,
    /// The front's number for the daemon's call that waits for the answer.
    ask: u64,
}

/// Who is deciding a waiting request.
#[derive(Debug)]
enum Who {
    Terminal,
    Page(String),
}

/// How many finished requests the page can still say something about.
const REMEMBERED: usize = 256;

/// The process that holds the key: the queue, the log, the rule file and the terminal.
struct Keeper {
    key: SigningKey,
    rules: Option<(PathBuf, Rules)>,
    log: Option<Arc<std::sync::Mutex<Writer>>>,
    config: Config,
    /// In arrival order.
    queue: Vec<Waiting>,
    /// What became of recent requests that wait no more, for a person who asks too late.
    finished: std::collections::VecDeque<(String, String)>,
    /// The terminal's turn: each waiting request, in arrival order.
    terminal: Option<std::sync::mpsc::Sender<(String, String)>>,
    /// The keys of the queue, for the terminal's thread.
    waiting: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    out: tokio::sync::mpsc::UnboundedSender<ToFront>,
}

impl Keeper {
    fn record(&self, entry: (&str, &str), decision: &str, by: &str, decider: &str, reason: &str) {
        let Some(log) = &self.log else { return };
        let (description, sandbox) = entry;
        let logged = Logged {
            time: crate::utc(crate::now_secs()),
            digest: hex::encode(fsd_proto::digest::content(description.as_bytes())),
            id: field(description, "id: "),
            mode: field(description, "mode: "),
            sandbox,
            decision,
            by,
            decider,
            reason,
        };
        let Ok(line) = serde_json::to_string(&logged) else { return };
        let mut writer = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match writer.append(&line, &logged.time) {
            Ok(Some(sealed)) => said(&sealed),
            Ok(None) => {}
            Err(e) => eprintln!("fsd-approver: cannot write the decision log: {e}"),
        }
    }

    fn tell(&self, message: ToFront) {
        // The front gone means serving is over; the main loop sees its end of the link close.
        let _ = self.out.send(message);
    }

    /// The decision, signed when it approves, as the daemon receives it.
    fn reply(
        &self,
        description: &str,
        approved: bool,
        by: Decider,
        decider: String,
        reason: String,
    ) -> Reply {
        let signature = if approved {
            hex::encode(signature(&self.key, &fsd_proto::signed_decision(description, &decider)))
        } else {
            String::new()
        };
        Reply { approved, signature, reason, decided_by: by as i32, decider }
    }

    fn ask(&mut self, ask: u64, sandbox: String, description: String) {
        if !description.starts_with("fsd escalation v1\n") {
            let reason = "not an fsd escalation description".to_owned();
            let decider = format!("rules: {reason}");
            let reply = Reply {
                approved: false,
                signature: String::new(),
                reason,
                decided_by: Decider::Rules as i32,
                decider,
            };
            return self.tell(ToFront::Answer { ask, reply });
        }
        if let Some((path, rules)) = &self.rules {
            let (decision, why) = explain(rules, &description);
            let decider = rules_decider(path, &why);
            let approved = decision == Decision::Allow;
            let verdict = if approved { "approved" } else { "refused" };
            self.record((&description, &sandbox), verdict, "rules", &decider, &why);
            let reason = if approved { String::new() } else { why };
            let reply = self.reply(&description, approved, Decider::Rules, decider, reason);
            return self.tell(ToFront::Answer { ask, reply });
        }
        let now = crate::now_secs();
        let key = key_of(&description);
        let expires = crate::link::expires(&description).unwrap_or(now);
        let entry =
            Entry { key: key.clone(), sandbox, description: description.clone(), arrived: now, expires };
        // Waiting before the terminal's thread can look for it.
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key.clone());
        // The terminal names no one, so it is not asked what needs a person other than the
        // one whose agent asked: that is decided on the page, where people log in.
        if let Some(terminal) = self.terminal.as_ref().filter(|_| !self.needs_another_person(&entry.sandbox))
        {
            let _ = terminal.send((key, description));
        }
        self.tell(ToFront::Queued { entry: entry.clone() });
        self.queue.push(Waiting { entry, ask });
    }

    /// Takes a request off the queue, tells the page, and remembers what became of it.
    fn finish(&mut self, i: usize, outcome: String) -> Waiting {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.queue[i].entry.key);
        let waiting = self.queue.remove(i);
        self.tell(ToFront::Removed { key: waiting.entry.key.clone() });
        if self.finished.len() == REMEMBERED {
            self.finished.pop_front();
        }
        self.finished.push_back((waiting.entry.key.clone(), outcome));
        waiting
    }

    /// Nobody decided before the request's expiry: logged, refused, off the queue.
    fn expire(&mut self, i: usize) {
        let outcome =
            format!("it expired at {} before anyone decided", crate::utc(self.queue[i].entry.expires));
        let w = self.finish(i, outcome);
        self.record((&w.entry.description, &w.entry.sandbox), "expired", "nobody", "", "");
        let reply = Reply {
            approved: false,
            signature: String::new(),
            reason: "nobody decided before it expired".into(),
            decided_by: Decider::Person as i32,
            decider: String::new(),
        };
        self.tell(ToFront::Answer { ask: w.ask, reply });
    }

    /// The daemon stopped waiting: at its own deadline (the request expired), or earlier.
    fn gone(&mut self, ask: u64) {
        let Some(i) = self.queue.iter().position(|w| w.ask == ask) else { return };
        // The daemon waits as long as the description's expiry, rounded up to the second.
        let expired = crate::now_secs() + 1 >= self.queue[i].entry.expires;
        let (decision, outcome) = if expired {
            (
                "expired",
                format!("it expired at {} before anyone decided", crate::utc(self.queue[i].entry.expires)),
            )
        } else {
            ("withdrawn", "the daemon stopped waiting for it".to_owned())
        };
        let w = self.finish(i, outcome);
        self.record((&w.entry.description, &w.entry.sandbox), decision, "nobody", "", "");
    }

    /// A person's decision on a waiting request; why not, when it cannot be taken.
    fn decide(&mut self, key: &str, who: Who, approve: bool, reason: String) -> Result<(), String> {
        let Some(i) = self.queue.iter().position(|w| w.entry.key == key) else {
            let outcome = self.finished.iter().rev().find(|(k, _)| k == key).map(|(_, o)| o.clone());
            return Err(match outcome {
                Some(outcome) => format!("This request is no longer waiting: {outcome}."),
                None => "No such request is waiting.".to_owned(),
            });
        };
        let expires = self.queue[i].entry.expires;
        // The daemon stops waiting at its exact deadline, in the second before `expires` (the
        // description rounds it up): a decision then may come after the daemon gave up, before
        // its going reached the keeper, and would be an approval nobody can use.
        if crate::now_secs() + 1 >= expires {
            self.expire(i);
            return Err(format!(
                "This request is no longer waiting: it expired at {} before anyone decided.",
                crate::utc(expires)
            ));
        }
        let entry = &self.queue[i].entry;
        if self.needs_another_person(&entry.sandbox) {
            let client = Summary::of(&entry.description).client;
            match &who {
                Who::Page(name) => {
                    if self.config.people.iter().any(|p| &p.name == name && p.clients.contains(&client)) {
                        return Err(format!(
                            "This request needs a person other than the one whose agent asked ({client} is yours): ask someone else to decide it."
                        ));
                    }
                }
                // The terminal names no one: it cannot show that it is another person.
                Who::Terminal => {
                    return Err(
                        "This request needs a person other than the one whose agent asked, and the terminal names no one: decide it on the page.".to_owned()
                    );
                }
            }
        }
        let decider = match &who {
            Who::Terminal => PERSON.to_owned(),
            Who::Page(name) => format!("{PERSON} {name}"),
        };
        let verdict = if approve { "approved" } else { "refused" };
        let w = self.finish(i, format!("{verdict} by {decider}"));
        self.record((&w.entry.description, &w.entry.sandbox), verdict, PERSON, &decider, &reason);
        let reason = if approve { String::new() } else { reason };
        let reply = self.reply(&w.entry.description, approve, Decider::Person, decider, reason);
        self.tell(ToFront::Answer { ask: w.ask, reply });
        Ok(())
    }

    /// Whether the requests of `sandbox` need a person other than the one whose agent asked.
    fn needs_another_person(&self, sandbox: &str) -> bool {
        self.config.daemons.iter().any(|d| d.sandbox == sandbox && d.require_another_person)
    }

    fn tick(&mut self) {
        let now = crate::now_secs();
        // A second past the expiry: the daemon's own deadline comes first, and says so itself.
        while let Some(i) = self.queue.iter().position(|w| now > w.entry.expires) {
            self.expire(i);
        }
    }
}

/// Binds the socket where nobody else can reach it yet (a private 0700 directory beside `path`),
/// gives it its mode and group there, and only then links it at `path`: no client ever sees it
/// with the umask's mode or the wrong group, and a file that appears at `path` meanwhile is never
/// replaced (the link fails instead).
pub(crate) fn bind_unix(
    path: &Path,
    socket: Socket,
) -> Result<std::os::unix::net::UnixListener, ApproverError> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
    let failed = |e: std::io::Error| ApproverError::Serve(format!("{}: {e}", path.display()));
    // Only a stale socket is replaced, never another kind of file.
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(ApproverError::Serve(format!("{} exists and is not a socket", path.display())));
        }
        std::fs::remove_file(path).map_err(failed)?;
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(ApproverError::Serve(format!("{}: not a socket path", path.display())));
    };
    let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let mut private_name = std::ffi::OsString::from(".fsd-approver.");
    private_name.push(format!("{}.{nanos:08x}.", std::process::id()));
    private_name.push(name);
    let private = parent.join(private_name);
    std::fs::DirBuilder::new().mode(0o700).create(&private).map_err(failed)?;
    let staged = private.join(name);
    let group_refused = std::cell::Cell::new(false);
    let placed = (|| {
        let listener = std::os::unix::net::UnixListener::bind(&staged)?;
        if let Some(gid) = socket.gid {
            std::os::unix::fs::chown(&staged, None, Some(gid)).inspect_err(|_| group_refused.set(true))?;
        }
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(socket.mode))?;
        std::fs::hard_link(&staged, path)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&private);
    // Only root or a member may give a file to a group: the bare EPERM named neither.
    // The group as the user typed it: a name they typed, shown as its number, read as a stranger.
    placed.map_err(|e| match (group_refused.get(), &socket.group, socket.gid) {
        (true, Some(group), _) => refused_group(path, group, &e),
        (true, None, Some(gid)) => refused_group(path, &gid.to_string(), &e),
        _ => failed(e),
    })
}

fn refused_group(path: &Path, group: &str, e: &std::io::Error) -> ApproverError {
    ApproverError::Serve(format!(
        "{}: cannot give the socket to group {group} (--socket-group): {e}; add the approver's user to that \
         group (usermod -aG {group} USER) or run it as root",
        path.display()
    ))
}

/// Runs serving: the front in its own process, this one keeping the key and the queue until a
/// signal or the front's end; the log then ends with a signed checkpoint and the socket file
/// is removed.
pub fn run(options: Options) -> Result<(), ApproverError> {
    let Options { key, listen, rules, socket, log, checkpoint_every, config, terminal } = options;
    if !listen.starts_with("unix:") && !listen.starts_with("tcp:") {
        return Err(ApproverError::Listen(listen));
    }
    config.check_listen(&listen)?;
    let log = match log {
        // Decisions name paths and reasons: readable by the approver's user alone.
        Some(path) => {
            let file = std::os::unix::fs::OpenOptionsExt::mode(&mut std::fs::OpenOptions::new(), 0o600)
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| ApproverError::Io(path.clone(), e))?;
            // The chain goes on where the file ends, signed by this approver's key.
            let writer = Writer::new(&path, file, LogKind::Decisions, checkpoint_every, Some(key.clone()))
                .map_err(|e| ApproverError::Io(path.clone(), e))?;
            eprintln!(
                "fsd-approver: decision log {}: checkpoints signed by {}",
                path.display(),
                hex::encode(key.verifying_key().to_bytes())
            );
            Some(Arc::new(std::sync::Mutex::new(writer)))
        }
        None => None,
    };
    let (ours, theirs) =
        std::os::unix::net::UnixStream::pair().map_err(|e| ApproverError::Serve(e.to_string()))?;
    let exe = std::env::current_exe().map_err(|e| ApproverError::Serve(e.to_string()))?;
    let mut front = std::process::Command::new(exe)
        .arg("front")
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| ApproverError::Serve(format!("cannot start the front: {e}")))?;
    let socket_path = listen.strip_prefix("unix:").map(PathBuf::from);
    let start = ToFront::Start {
        config: Box::new(config.clone()),
        listen,
        socket_mode: socket.mode,
        socket_gid: socket.gid,
        socket_group: socket.group.clone(),
    };
    let sealed = log.clone();
    let served = keep(
        ours,
        start,
        Keeper {
            key,
            rules,
            log,
            config,
            queue: Vec::new(),
            finished: Default::default(),
            terminal: None,
            waiting: Arc::default(),
            out: tokio::sync::mpsc::unbounded_channel().0,
        },
        terminal,
    );
    // The front ends when its end of the link closes (ours is closed by now).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while matches!(front.try_wait(), Ok(None)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let _ = front.kill();
    let _ = front.wait();
    if let Some(path) = &socket_path {
        use std::os::unix::fs::FileTypeExt;
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(path);
        }
    }
    // However serving ended, the log ends with a signed checkpoint.
    if let Some(log) = sealed {
        let mut writer = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match writer.checkpoint(CheckpointKind::Shutdown, &crate::utc(crate::now_secs())) {
            Ok(sealed) => said(&sealed),
            Err(e) => eprintln!("fsd-approver: cannot write the decision log's shutdown checkpoint: {e}"),
        }
    }
    served
}

/// One line on stderr (the journal, under systemd) for each checkpoint of the decision log: its
/// hash, kept off this host, is what `verify-log --expect-checkpoint` checks the file against
/// later, the one way to find the log cut back to an earlier checkpoint.
fn said(sealed: &fsd_proto::chain::Sealed) {
    eprintln!(
        "fsd-approver: decision log checkpoint: {} seq {} hash {}",
        sealed.kind.as_str(),
        sealed.link.seq,
        sealed.hash_hex()
    );
}

/// The person at this terminal, asked about each waiting request in arrival order on a thread
/// of its own (a read of the terminal cannot be cancelled). A request that waits no more when
/// its turn comes is skipped (`waiting` is the queue's keys); one decided on the page while the
/// terminal asked is said so there when its answer comes.
fn terminal_turns(
    answers: tokio::sync::mpsc::UnboundedSender<(String, bool, String)>,
    waiting: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
) -> std::sync::mpsc::Sender<(String, String)> {
    let (turns, asked) = std::sync::mpsc::channel::<(String, String)>();
    std::thread::spawn(move || {
        while let Ok((key, description)) = asked.recv() {
            if !waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(&key) {
                continue;
            }
            match ask(&description) {
                Ok((approved, reason)) => {
                    if answers.send((key, approved, reason)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    eprintln!("fsd-approver: {e}; the terminal decides nothing more");
                    return;
                }
            }
        }
    });
    turns
}

fn keep(
    link: std::os::unix::net::UnixStream,
    start: ToFront,
    mut keeper: Keeper,
    terminal: bool,
) -> Result<(), ApproverError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ApproverError::Serve(e.to_string()))?;
    runtime.block_on(async move {
        link.set_nonblocking(true).map_err(|e| ApproverError::Serve(e.to_string()))?;
        let link = tokio::net::UnixStream::from_std(link).map_err(|e| ApproverError::Serve(e.to_string()))?;
        let (read, mut write) = link.into_split();
        let mut read = tokio::io::BufReader::new(read);
        let (out, mut outgoing) = tokio::sync::mpsc::unbounded_channel();
        keeper.out = out;
        keeper.tell(start);
        let writer = tokio::spawn(async move {
            while let Some(message) = outgoing.recv().await {
                if crate::link::send(&mut write, &message).await.is_err() {
                    return;
                }
            }
        });
        let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel();
        if terminal {
            keeper.terminal = Some(terminal_turns(answers, keeper.waiting.clone()));
        }
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| ApproverError::Serve(e.to_string()))?;
        let ended = loop {
            tokio::select! {
                message = crate::link::recv::<_, ToKeeper>(&mut read) => match message {
                    Ok(Some(ToKeeper::Ask { ask, sandbox, description })) => keeper.ask(ask, sandbox, description),
                    Ok(Some(ToKeeper::Gone { ask })) => keeper.gone(ask),
                    Ok(Some(ToKeeper::Decide { ticket, key, person, approve, reason })) => {
                        let refusal = keeper.decide(&key, Who::Page(person), approve, reason).err();
                        keeper.tell(ToFront::Decided { ticket, refusal });
                    }
                    Ok(Some(ToKeeper::Failed { reason })) => break Err(ApproverError::Front(reason)),
                    Ok(None) => break Err(ApproverError::Front("cannot serve: the front process stopped".into())),
                    Err(e) => break Err(ApproverError::Front(format!("cannot serve: the front process: {e}"))),
                },
                Some((key, approved, reason)) = answered.recv() => {
                    if let Err(why) = keeper.decide(&key, Who::Terminal, approved, reason) {
                        eprintln!("fsd-approver: {why}");
                    }
                }
                _ = tick.tick() => keeper.tick(),
                _ = tokio::signal::ctrl_c() => break Ok(()),
                _ = term.recv() => break Ok(()),
            }
        };
        writer.abort();
        ended
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Daemon, Person};

    fn keeper() -> (Keeper, tokio::sync::mpsc::UnboundedReceiver<ToFront>) {
        let token = |t: &str| serde_json::from_value(serde_json::json!(t)).unwrap();
        let config = Config {
            web: None,
            grpc: None,
            people: vec![Person {
                name: "alice".into(),
                token: Some(token("a")),
                certificate: None,
                clients: vec!["uid:0".into()],
            }],
            daemons: vec![Daemon {
                sandbox: "beta".into(),
                token: Some(token("b")),
                certificate: None,
                require_another_person: true,
            }],
            webhook: None,
        };
        let (out, told) = tokio::sync::mpsc::unbounded_channel();
        let keeper = Keeper {
            key: SigningKey::from_bytes(&[7; 32]),
            rules: None,
            log: None,
            config,
            queue: Vec::new(),
            finished: Default::default(),
            terminal: None,
            waiting: Arc::default(),
            out,
        };
        (keeper, told)
    }

    fn description(id: &str, expires: u64) -> String {
        format!(
            "fsd escalation v1\nid: {id}\nnonce: 00\nsession: s\nclient: uid:0\nmode: danger-full-access\njustification: j\nexpires: {expires}\nop 1: readText /etc/x\n"
        )
    }

    /// One queue in arrival order; a decision is taken once, signed for exactly that
    /// description and the person who took it; an expired request and a request that needs
    /// another person are refused, saying why.
    #[test]
    fn the_queue_takes_each_decision_once_and_refuses_what_it_may_not_take() {
        let (mut k, mut told) = keeper();
        let later = crate::now_secs() + 600;
        let gone = crate::now_secs();
        let (a, b, c) = (description("a", later), description("b", later), description("c", gone));
        // In its last second: the daemon's own deadline may have passed already.
        let last = crate::now_secs() + 1;
        let d = description("d", last);
        k.ask(1, "alpha".into(), a.clone());
        k.ask(2, "beta".into(), b.clone());
        k.ask(3, "alpha".into(), c.clone());
        k.ask(4, "alpha".into(), d.clone());
        let keys: Vec<String> = k.queue.iter().map(|w| w.entry.key.clone()).collect();
        assert_eq!(keys, [key_of(&a), key_of(&b), key_of(&c), key_of(&d)]);
        let page = |name: &str| Who::Page(name.to_owned());
        let cases: Vec<(&str, Who, Result<(), String>)> = vec![
            (&b, page("alice"), Err("This request needs a person other than the one whose agent asked (uid:0 is yours): ask someone else to decide it.".into())),
            (&b, Who::Terminal, Err("This request needs a person other than the one whose agent asked, and the terminal names no one: decide it on the page.".into())),
            (&a, page("alice"), Ok(())),
            (&a, page("bob"), Err("This request is no longer waiting: approved by person alice.".into())),
            (&b, page("bob"), Ok(())),
            (&c, Who::Terminal, Err(format!("This request is no longer waiting: it expired at {} before anyone decided.", crate::utc(gone)))),
            (&d, page("bob"), Err(format!("This request is no longer waiting: it expired at {} before anyone decided.", crate::utc(last)))),
            ("fsd escalation v1\nother\n", page("bob"), Err("No such request is waiting.".into())),
        ];
        for (description, who, expected) in cases {
            let approve = !matches!(&who, Who::Page(p) if p == "bob");
            assert_eq!(k.decide(&key_of(description), who, approve, "no".into()), expected, "{description}");
        }
        assert!(k.queue.is_empty());
        let mut answers = Vec::new();
        while let Ok(message) = told.try_recv() {
            if let ToFront::Answer { ask, reply } = message {
                answers.push((ask, reply));
            }
        }
        let public = k.key.verifying_key();
        let (ask, approved) = &answers[0];
        let signature =
            ed25519_dalek::Signature::from_slice(&hex::decode(&approved.signature).unwrap()).unwrap();
        assert_eq!((*ask, approved.approved, approved.decider.as_str()), (1, true, "person alice"));
        public.verify_strict(fsd_proto::signed_decision(&a, "person alice").as_bytes(), &signature).unwrap();
        let refused: Vec<(u64, bool, &str, &str)> = answers[1..]
            .iter()
            .map(|(ask, r)| (*ask, r.approved, r.decider.as_str(), r.reason.as_str()))
            .collect();
        assert_eq!(
            refused,
            [
                (2, false, "person bob", "no"),
                (3, false, "", "nobody decided before it expired"),
                (4, false, "", "nobody decided before it expired")
            ]
        );
    }
}
