//! The MCP server face: `fsd-tools mcp` serves the visible tools over stdio with rmcp, one
//! `Session` (one owner of observations) per process.
//!
//! Mapping, fixed here and pinned by `tests/tests/mcp.rs`:
//! - tools/list: `Tools::schemas()` plus truthful annotations; the instructions are
//!   `Tools::guidance()`.
//! - tools/call: text blocks stay text blocks, images become image blocks (base64 + mimeType).
//!   Every tool failure, argument mistakes included, is a result with `isError: true`, never a
//!   JSON-RPC error. The stable code and the tool's metadata ride in the result's `_meta` as
//!   `fsd/code` (a string, or null on success) and `fsd/meta` (an object), never in
//!   `structuredContent`: some clients show structured content to the model instead of the text,
//!   and the model must read the envelope.
//! - An unknown tool name is a JSON-RPC error `-32602` (`Unknown tool: NAME`), as the MCP spec
//!   asks: the client asked for something the server never listed, not a tool that failed.
//! - Escalation prompts (`escalationPrompt = true`, `client` trust): an MCP server has no
//!   terminal, so the person is asked through the host with `elicitation/create` (a form:
//!   approve yes/no, an optional reason). A host without the elicitation capability gets a
//!   refusal that says so.
//! - URL-mode elicitation of the approver's page under 2026-07-28 (stateless: no server-to-client
//!   requests) is the multi-round-trip pattern: the call runs on a task of its own; once it
//!   sends the person to the page, tools/call answers `input_required` with the link as an
//!   `elicitation/create` and an opaque `requestState` naming the waiting call (kept in this
//!   process), and the retried call that echoes it gets the call's result (the page's decision).
//! - `notifications/cancelled`: rmcp cancels the request's token and drops whatever the handler
//!   returns afterwards; the handler drops the call's future, which stops it at its next await
//!   (a gRPC call in flight is abandoned, so its effect is unknown, like `FS_ABORTED`). No
//!   response is sent for the cancelled id.
//! - No daemon (the embedded one did not start): [`Unavailable`] still answers `initialize` and
//!   tools/list, and every call is an error result (`UNAVAILABLE`) carrying the daemon's start
//!   line, since MCP hosts hide a server's stderr and show one that exits only as failed.

use std::sync::Arc;

use base64::Engine;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InputRequest,
    InputRequiredResult, JsonObject, ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer, ServerInitializeError};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;

use crate::failure::ToolError;
use crate::local_approver::{Host, HostAnswer};
use crate::tools::{Block, Session, ToolResult, Tools};

/// The `_meta` key of the stable code (`FS_*`, `INVALID_ARGS`, …; null on success).
pub const META_CODE: &str = "fsd/code";
/// The `_meta` key of the tool's metadata (`affectedPaths`, `diffs`, …).
pub const META_META: &str = "fsd/meta";

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// Boxed: rmcp's error is large and this one travels only up to `main`.
    #[error("MCP initialization failed: {0}")]
    Initialize(#[from] Box<ServerInitializeError>),
    #[error("the MCP service task failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// The MCP server: the tool list, fixed for the process, and the one session calls run in.
#[derive(Debug, Clone)]
pub struct McpServer {
    tools: Arc<Vec<Tool>>,
    /// The list for a host that cannot ask the person (no elicitation): without the escalation
    /// fields where no one else could be asked either.
    tools_no_elicitation: Arc<Vec<Tool>>,
    visible: Arc<Vec<&'static str>>,
    instructions: String,
    /// Calls take turns on the session (observations are per session and calls run in order);
    /// a cancelled call releases it when its future is dropped.
    session: Arc<Mutex<Session>>,
    /// Calls that answered `input_required` (2026-07-28) and run on, by their `requestState`.
    waiting: Arc<std::sync::Mutex<Vec<Waiting>>>,
}

/// A call that answered `input_required` and runs on until its retry takes its result.
#[derive(Debug)]
struct Waiting {
    state: String,
    /// The call it is: a retry must be the same call (tool and arguments).
    name: String,
    args: Value,
    result: Running,
}

/// A call's task, aborted when this is dropped: a first leg cancelled, a retry cancelled, or a
/// call abandoned past [`MAX_WAITING`] leaves no call running (and holding the session) that
/// nobody will take the result of.
#[derive(Debug)]
struct Running(Option<tokio::task::JoinHandle<ToolResult>>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

impl std::future::Future for Running {
    type Output = Result<ToolResult, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.0.as_mut() {
            Some(task) => std::pin::Pin::new(task).poll(cx),
            // Handed on to a `Waiting`: nothing is left here to finish.
            None => std::task::Poll::Pending,
        }
    }
}

/// The most calls that may wait for their retry at once; past it the oldest is abandoned.
const MAX_WAITING: usize = 16;
/// The `inputRequests` key of the approver page's link.
pub const APPROVER_PAGE_INPUT: &str = "fsd/approver-page";

impl McpServer {
    pub fn new(session: Session) -> McpServer {
        let tools = session.tools();
        let listed = session.schemas_for_host(true).iter().filter_map(tool_of).collect();
        let no_elicitation = session.schemas_for_host(false).iter().filter_map(tool_of).collect();
        McpServer {
            tools: Arc::new(listed),
            tools_no_elicitation: Arc::new(no_elicitation),
            visible: Arc::new(tools.visible()),
            instructions: tools.guidance(),
            session: Arc::new(Mutex::new(session)),
            waiting: Arc::default(),
        }
    }

    /// The tools as tools/list shows them.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Serves MCP on this process's stdin and stdout until the client closes stdin.
    pub async fn serve_stdio(self) -> Result<(), McpError> {
        serve_stdio(self).await
    }

    async fn call(&self, name: String, args: Value, peer: rmcp::Peer<RoleServer>) -> ToolResult {
        self.call_with(name, args, Arc::new(Elicitor { peer })).await
    }

    async fn call_with(&self, name: String, args: Value, host: Arc<dyn Host>) -> ToolResult {
        let mut session = self.session.lock().await;
        session.set_host(Some(host));
        let result = session.call(&name, args).await;
        session.set_host(None);
        result
    }

    /// A call under the multi-round-trip pattern: it runs on a task; when it sends the person
    /// to the approver's page before it is done, the answer is `input_required` with that link,
    /// and the call waits for its retry (`resume`).
    async fn call_rounds(
        &self,
        name: String,
        args: Value,
        carried: Option<crate::connect::trace::Carried>,
    ) -> CallToolResponse {
        let (link, linked) = tokio::sync::oneshot::channel();
        let host: Arc<dyn Host> = Arc::new(Rounds { link: std::sync::Mutex::new(Some(link)) });
        let server = self.clone();
        let (call_name, call_args) = (name.clone(), args.clone());
        let mut running = Running(Some(tokio::spawn(crate::connect::trace::within(carried, async move {
            server.call_with(call_name, call_args, host).await
        }))));
        tokio::select! {
            finished = &mut running => call_result(finished.unwrap_or_else(|e| aborted(&e))).into(),
            Ok((id, url, message)) = linked => {
                let state = format!("fsd-call-{}", elicitation_id());
                let params = rmcp::model::ElicitRequestParams::UrlElicitationParams {
                    meta: None,
                    message,
                    url,
                    elicitation_id: id,
                };
                let link = InputRequest::Elicitation(rmcp::model::Request::new(params));
                let mut waiting = self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if waiting.len() >= MAX_WAITING {
                    // Dropped: its task is aborted.
                    waiting.remove(0);
                }
                waiting.push(Waiting { state: state.clone(), name, args, result: Running(running.0.take()) });
                let requests = std::collections::BTreeMap::from([(APPROVER_PAGE_INPUT.to_owned(), link)]);
                CallToolResponse::InputRequired(InputRequiredResult::new(Some(requests), Some(state)))
            }
        }
    }

    /// The retry of a call that answered `input_required`: its result, once the call is done
    /// (the approver's page decided, or the request expired). What the host answered to the
    /// link decides nothing, so the responses are not read.
    async fn resume(&self, state: &str, name: &str, args: &Value) -> Result<CallToolResponse, ErrorData> {
        let found = {
            let mut waiting = self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let at = waiting.iter().position(|w| w.state == state && w.name == name && &w.args == args);
            at.map(|i| waiting.remove(i))
        };
        let Some(found) = found else {
            return Err(ErrorData::invalid_params(
                "Invalid or expired requestState: no call of this tool with these arguments waits for it",
                Some(json!({"reason": "invalid_request_state"})),
            ));
        };
        let mut task = found.result;
        let result = (&mut task).await.unwrap_or_else(|e| aborted(&e));
        Ok(call_result(result).into())
    }
}

/// Serves `handler` on this process's stdin and stdout until the client closes stdin.
async fn serve_stdio(handler: impl ServerHandler) -> Result<(), McpError> {
    let running = handler.serve((stdio::input(), stdio::output())).await.map_err(Box::new)?;
    running.waiting().await?;
    Ok(())
}

/// What `initialize` answers: this server, with tools and the tools' guidance.
fn server_config(instructions: &str) -> ServerConfig {
    let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
    info.server_info =
        Implementation::new("fsd-tools", env!("CARGO_PKG_VERSION")).with_title("fsd file tools");
    if !instructions.is_empty() {
        info = info.with_instructions(instructions.to_owned());
    }
    info
}

/// A call of a tool tools/list never showed: a JSON-RPC error, with the setting that turns an
/// off tool on (the host's user reads this).
fn not_listed(tools: &Tools, name: &str) -> ErrorData {
    let not_offered = tools.not_offered(name);
    let message = if not_offered.starts_with("unknown tool") {
        format!("Unknown tool: {name}")
    } else {
        format!("Unknown tool: {name} ({not_offered})")
    };
    ErrorData::invalid_params(message, Some(json!({"fsd/code": "UNKNOWN_TOOL"})))
}

/// The MCP face without a daemon: the embedded daemon did not start, and `reason` is its start
/// line. It lists the tools the configuration makes visible (without the escalation fields:
/// nothing can be approved) so the model calls one, and every call returns `reason`, so a host
/// that hides stderr still shows why, in the call's result.
#[derive(Debug, Clone)]
pub struct Unavailable {
    tools: Arc<Tools>,
    listed: Arc<Vec<Tool>>,
    reason: Arc<str>,
}

impl Unavailable {
    pub fn new(tools: Tools, reason: String) -> Unavailable {
        let listed = tools.schemas().iter().filter_map(tool_of).collect();
        Unavailable { tools: Arc::new(tools), listed: Arc::new(listed), reason: Arc::from(reason) }
    }

    /// Serves MCP on this process's stdin and stdout until the client closes stdin.
    pub async fn serve_stdio(self) -> Result<(), McpError> {
        serve_stdio(self).await
    }
}

impl ServerHandler for Unavailable {
    fn get_info(&self) -> ServerConfig {
        server_config(&self.tools.guidance())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.listed.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !self.listed.iter().any(|t| t.name == request.name) {
            return Err(not_listed(&self.tools, &request.name));
        }
        Ok(call_result(ToolResult::error(ToolError::unavailable(&self.reason))).into())
    }
}

/// A call task that ended without a result (abandoned past [`MAX_WAITING`], or it panicked).
fn aborted(e: &tokio::task::JoinError) -> ToolResult {
    ToolResult::error(crate::failure::ToolError::unavailable(&format!("the call did not finish ({e})")))
}

/// The host of a call under the multi-round-trip pattern: it cannot be asked anything while the
/// call runs (no server-to-client requests); the approver page's link leaves by the call's
/// `input_required` answer instead.
#[derive(Debug)]
struct Rounds {
    link: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<(String, String, String)>>>,
}

impl Host for Rounds {
    fn ask(
        &self,
        _message: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = HostAnswer> + Send + '_>> {
        Box::pin(async { HostAnswer::Unsupported })
    }

    fn send_to(&self, url: String, message: String) -> Option<String> {
        let link = self.link.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()?;
        let id = elicitation_id();
        link.send((id.clone(), url, message)).ok().map(|()| id)
    }
}

/// Asks the person through the MCP client (`elicitation/create`, form mode).
#[derive(Debug)]
struct Elicitor {
    peer: rmcp::Peer<RoleServer>,
}

/// The form: approve (required) and an optional reason.
fn approval_form() -> rmcp::model::ElicitationSchema {
    use rmcp::model::{BooleanSchema, ElicitationSchema, PrimitiveSchemaDefinition, StringSchema};
    let mut schema = ElicitationSchema::new(
        [
            (
                "approve".to_owned(),
                PrimitiveSchemaDefinition::Boolean(BooleanSchema::new().title("Approve this one call")),
            ),
            (
                "reason".to_owned(),
                PrimitiveSchemaDefinition::String(
                    StringSchema::new().title("Reason (optional, shown to the agent)"),
                ),
            ),
        ]
        .into_iter()
        .collect(),
    );
    schema.required = Some(vec!["approve".to_owned()]);
    schema
}

/// The person's answer from an elicitation result.
fn answer(result: &rmcp::model::ElicitResult) -> HostAnswer {
    use rmcp::model::ElicitationAction;
    let content = result.content.as_ref();
    let reason = content.and_then(|c| c.get("reason")).and_then(Value::as_str).unwrap_or("").to_owned();
    match result.action {
        ElicitationAction::Accept if content.and_then(|c| c.get("approve")) == Some(&Value::Bool(true)) => {
            HostAnswer::Approved
        }
        ElicitationAction::Accept => HostAnswer::Refused(reason),
        _ => HostAnswer::Refused(reason),
    }
}

impl Host for Elicitor {
    fn ask(
        &self,
        message: String,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = HostAnswer> + Send + '_>> {
        Box::pin(async move {
            let supported = self.peer.peer_info().is_some_and(|info| info.capabilities.elicitation.is_some());
            if !supported {
                return HostAnswer::Unsupported;
            }
            let params = rmcp::model::ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: approval_form(),
            };
            let request = rmcp::model::ServerRequest::ElicitRequest(rmcp::model::Request::new(params));
            match self.peer.send_request(request).await {
                Ok(rmcp::model::ClientResult::ElicitResult(result)) => answer(&result),
                Ok(_) => HostAnswer::Refused("the host answered something else".to_owned()),
                Err(e) => HostAnswer::Refused(format!("the host could not ask: {e}")),
            }
        })
    }

    /// URL-mode elicitation (MCP 2025-11-25), for a host that declared it and negotiated a
    /// version with server-to-client requests: sent on a task of its own, since the host may
    /// answer only once the person is done (or never); the approver's decision is what counts.
    fn send_to(&self, url: String, message: String) -> Option<String> {
        let info = self.peer.peer_info()?;
        let url_mode = info.capabilities.elicitation.as_ref().is_some_and(|e| e.url.is_some());
        if !url_mode || !info.protocol_version.has_initialize() {
            return None;
        }
        let id = elicitation_id();
        let params = rmcp::model::ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message,
            url,
            elicitation_id: id.clone(),
        };
        let request = rmcp::model::ServerRequest::ElicitRequest(rmcp::model::Request::new(params));
        let peer = self.peer.clone();
        tokio::spawn(async move {
            if let Err(e) = peer.send_request(request).await {
                tracing::debug!(error = %e, "the host did not take the approver page's link");
            }
        });
        Some(id)
    }

    fn sent_done(&self, id: String) {
        let notification =
            rmcp::model::ServerNotification::CustomNotification(rmcp::model::CustomNotification::new(
                "notifications/elicitation/complete",
                Some(json!({"elicitationId": id})),
            ));
        let peer = self.peer.clone();
        tokio::spawn(async move {
            let _ = peer.send_notification(notification).await;
        });
    }
}

/// A fresh elicitation id: unique in this process and unlikely to repeat across processes.
fn elicitation_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("fsd-{}-{nanos:08x}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One tools/list entry from a `Tools::schemas()` entry.
fn tool_of(schema: &Value) -> Option<Tool> {
    let name = schema.get("name")?.as_str()?.to_owned();
    let description = schema.get("description").and_then(Value::as_str).unwrap_or_default().to_owned();
    let input_schema: JsonObject = schema.get("input_schema")?.as_object()?.clone();
    let annotations = annotations(&name);
    Some(Tool::new(name, description, input_schema).with_annotations(annotations))
}

/// What each tool does to the filesystem. None of them reaches beyond the daemon's roots, so
/// none is open-world. Read-only tools record observations in the session, not on disk; a
/// checkpoint adds a point to the change record and overwrites nothing.
pub fn annotations(name: &str) -> ToolAnnotations {
    let (title, read_only, destructive, idempotent) = match crate::tools::Tool::parse(name) {
        Some(tool) => (tool.title(), tool.read_only(), tool.may_mutate(), tool.idempotent()),
        // A tool this table does not know yet is described by the safest claims.
        None => ("", false, true, false),
    };
    let base = if title.is_empty() { ToolAnnotations::new() } else { ToolAnnotations::with_title(title) };
    base.read_only(read_only).destructive(destructive).idempotent(idempotent).open_world(false)
}

/// A finished tool call as an MCP result.
pub fn call_result(result: ToolResult) -> CallToolResult {
    let content = result
        .content
        .into_iter()
        .map(|block| match block {
            Block::Text(text) => ContentBlock::text(text),
            Block::Image { mime_type, data } => {
                ContentBlock::image(base64::engine::general_purpose::STANDARD.encode(data), mime_type)
            }
        })
        .collect();
    let mut meta = Map::new();
    meta.insert(META_CODE.to_owned(), json!(result.code));
    meta.insert(META_META.to_owned(), Value::Object(result.meta));
    let call =
        if result.is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
    call.with_meta(Some(MetaObject(meta)))
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        server_config(&self.instructions)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let elicits = context.peer.peer_info().is_some_and(|info| info.capabilities.elicitation.is_some());
        let tools = if elicits { &self.tools } else { &self.tools_no_elicitation };
        Ok(ListToolsResult::with_all_items(tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if !self.visible.iter().any(|v| *v == name) {
            return Err(not_listed(self.session.lock().await.tools(), &name));
        }
        // The agent host's trace continues into the daemon (OpenTelemetry's MCP conventions put
        // the W3C context in the request's `_meta`).
        let carried = request.meta.as_ref().and_then(|meta| crate::connect::trace::Carried::from_meta(meta));
        let carried = carried.or_else(|| crate::connect::trace::Carried::from_meta(&context.meta));
        let args = Value::Object(request.arguments.unwrap_or_default());
        if let Some(state) = &request.request_state {
            return self.resume(state, &name, &args).await;
        }
        // 2026-07-28 (no initialize, so no server-to-client requests) with a host that opens
        // links: the approver page's link goes out as the call's `input_required` answer.
        let stateless = context.meta.protocol_version().is_some_and(|v| !v.has_initialize());
        let opens_links =
            context.client_capabilities().and_then(|c| c.elicitation).is_some_and(|e| e.url.is_some());
        if stateless && opens_links {
            return tokio::select! {
                biased;
                () = context.ct.cancelled() => Err(ErrorData::internal_error("cancelled", None)),
                response = self.call_rounds(name, args, carried) => Ok(response),
            };
        }
        tokio::select! {
            // Checked first so a call cancelled while it waited for the session never starts.
            biased;
            () = context.ct.cancelled() => {
                // rmcp has forgotten this id, so nothing here reaches the client.
                Err(ErrorData::internal_error("cancelled", None))
            }
            result = crate::connect::trace::within(carried, self.call(name, args, context.peer.clone())) => {
                Ok(call_result(result).into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_are_truthful() {
        let read = annotations("read");
        assert_eq!(read.read_only_hint, Some(true));
        assert_eq!(read.open_world_hint, Some(false));
        for name in ["write", "edit", "apply_patch", "str_replace_editor", "something_new"] {
            let a = annotations(name);
            assert_eq!(a.read_only_hint, Some(false), "{name}");
            assert_eq!(a.destructive_hint, Some(true), "{name}");
        }
        assert_eq!(annotations("write").idempotent_hint, Some(true));
        assert_eq!(annotations("edit").idempotent_hint, Some(false));
        // The change record's tools: (readOnly, destructive, idempotent), never open-world.
        let check = |name: &str, expected: (bool, bool, bool)| {
            let a = annotations(name);
            let got = (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint);
            assert_eq!(got, (Some(expected.0), Some(expected.1), Some(expected.2), Some(false)), "{name}");
        };
        check("changes", (true, false, true));
        check("checkpoint", (false, false, false));
        check("rewind", (false, true, false));
        let titles: Vec<Option<String>> =
            ["checkpoint", "changes", "rewind"].iter().map(|n| annotations(n).title).collect();
        assert_eq!(
            titles,
            [
                Some("Checkpoint".to_owned()),
                Some("List changes".to_owned()),
                Some("Rewind changes".to_owned())
            ]
        );
    }

    #[test]
    fn failures_carry_code_and_meta_in_meta_only() {
        let r =
            call_result(ToolResult::error(ToolError::invalid_args("file_path must be a non-empty string")));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["isError"], json!(true));
        assert_eq!(
            v["content"],
            json!([{"type": "text", "text": "Error: file_path must be a non-empty string"}])
        );
        assert_eq!(v["_meta"], json!({"fsd/code": "INVALID_ARGS", "fsd/meta": {}}));
        assert!(v.get("structuredContent").is_none());
    }

    #[test]
    fn images_become_image_blocks() {
        let result = ToolResult {
            is_error: false,
            code: None,
            content: vec![
                Block::Text("t".into()),
                Block::Image { mime_type: "image/png".into(), data: vec![1, 2, 3] },
            ],
            meta: Map::new(),
        };
        let v = serde_json::to_value(call_result(result)).unwrap();
        assert_eq!(v["content"][1], json!({"type": "image", "data": "AQID", "mimeType": "image/png"}));
        assert_eq!(v["_meta"]["fsd/code"], Value::Null);
    }
}

/// Standard input and output without tokio's blocking pool: `tokio::io::stdin()` (and rmcp's
/// stdio transport) hands every read and write to a pool thread, a hop per message. MCP hosts
/// start servers on pipes (or socket pairs), which epoll watches like any socket, so the runtime
/// reads and writes them itself; anything else (a file, a terminal) falls back to tokio's
/// standard streams.
mod stdio {
    use std::os::fd::{AsFd, OwnedFd};
    use std::pin::Pin;

    use tokio::io::{AsyncRead, AsyncWrite};

    pub type Input = Pin<Box<dyn AsyncRead + Send>>;
    pub type Output = Pin<Box<dyn AsyncWrite + Send>>;

    /// A non-blocking socket on `fd`, if it is a socket.
    fn socket(fd: OwnedFd) -> Option<tokio::net::UnixStream> {
        let socket = std::os::unix::net::UnixStream::from(fd);
        // getsockname fails on anything that is not a socket.
        socket.local_addr().ok()?;
        socket.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(socket).ok()
    }

    pub fn input() -> Input {
        let dup = || std::io::stdin().as_fd().try_clone_to_owned().ok();
        if let Some(pipe) = dup().and_then(|fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok()) {
            return Box::pin(pipe);
        }
        if let Some(socket) = dup().and_then(socket) {
            return Box::pin(socket);
        }
        Box::pin(tokio::io::stdin())
    }

    pub fn output() -> Output {
        let dup = || std::io::stdout().as_fd().try_clone_to_owned().ok();
        if let Some(pipe) = dup().and_then(|fd| tokio::net::unix::pipe::Sender::from_owned_fd(fd).ok()) {
            return Box::pin(pipe);
        }
        if let Some(socket) = dup().and_then(socket) {
            return Box::pin(socket);
        }
        Box::pin(tokio::io::stdout())
    }
}
