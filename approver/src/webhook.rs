//! The webhook: one POST of JSON, in the shape Slack-compatible incoming webhooks accept
//! (`text`, plus an `fsd` object for machines), when a request starts to wait. It names the
//! sandbox, each operation and path, the mode, the model's justification (escaped, cut) and the
//! page's link for that request; never a byte of file content (no diff, no digest). Tries are
//! bounded and run beside everything else: a webhook that fails or hangs never holds a decision.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use crate::config::Webhook;
use crate::link::{Entry, Summary};

/// The longest justification or path a notification carries, in characters (escaped).
pub const CUT: usize = 200;
/// The most operations a notification lists; the rest are counted.
pub const MAX_OPS: usize = 10;
/// How long one try may take.
const TRY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Notifier {
    hook: Arc<Webhook>,
}

/// Text a person reads, escaped by the one escaper, cut at [`CUT`] characters with the rest
/// counted.
fn cut(text: &str) -> String {
    let shown = fsd_proto::names::for_people(text);
    if shown.chars().count() <= CUT {
        return shown;
    }
    let head: String = shown.chars().take(CUT).collect();
    format!("{head}... ({} more bytes not shown)", shown.len() - head.len())
}

/// Slack's mrkdwn gives `&`, `<` and `>` meaning: they are sent as entities.
fn mrkdwn(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The notification for `entry`; `page` is the page's address (empty when there is no page).
pub fn payload(entry: &Entry, page: &str) -> Value {
    let summary = Summary::of(&entry.description);
    let url = if page.is_empty() { String::new() } else { format!("{page}/r/{}", entry.key) };
    let sandbox = cut(&entry.sandbox);
    let justification = cut(&summary.justification);
    let mode = cut(&summary.mode);
    let ops: Vec<Value> = summary
        .ops
        .iter()
        .take(MAX_OPS)
        .map(|(op, path)| json!({"op": cut(op), "path": cut(path)}))
        .collect();
    let mut listed: Vec<String> =
        summary.ops.iter().take(MAX_OPS).map(|(op, path)| format!("{} {}", cut(op), cut(path))).collect();
    if summary.ops.len() > MAX_OPS {
        listed.push(format!("and {} more", summary.ops.len() - MAX_OPS));
    }
    let place = if sandbox.is_empty() { String::new() } else { format!(" in sandbox {sandbox}") };
    let mut text = format!(
        "fsd: an escalation waits{place}: {} at {mode}. Justification: {justification}",
        listed.join(", ")
    );
    text = mrkdwn(&text);
    if !url.is_empty() {
        text.push_str(&format!(" <{url}|Open the approver page>"));
    }
    json!({
        "text": text,
        "fsd": {
            "sandbox": sandbox,
            "request": entry.key,
            "mode": mode,
            "ops": ops,
            "operations": summary.ops.len(),
            "justification": justification,
            "expires": crate::utc(entry.expires),
            "url": url,
        }
    })
}

impl Notifier {
    pub fn new(hook: Webhook) -> Notifier {
        Notifier { hook: Arc::new(hook) }
    }

    /// Sends the notification for `entry` on a task of its own.
    pub fn notify(&self, entry: &Entry, page: &str) {
        let body = payload(entry, page).to_string();
        let hook = self.hook.clone();
        tokio::spawn(async move {
            let mut last = String::new();
            for attempt in 0..hook.attempts {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_secs(1 << (attempt - 1).min(5))).await;
                }
                match tokio::time::timeout(TRY_TIMEOUT, post(&hook, body.clone())).await {
                    Ok(Ok(())) => return,
                    Ok(Err(e)) => last = e,
                    Err(_) => last = format!("no answer within {} s", TRY_TIMEOUT.as_secs()),
                }
            }
            eprintln!("fsd-approver: the webhook failed {} times; the last: {last}", hook.attempts);
        });
    }
}

/// One try: a 2xx status is delivered.
async fn post(hook: &Webhook, body: String) -> Result<(), String> {
    let (tls, rest) = match hook.url.split_once("://") {
        Some(("https", rest)) => (true, rest),
        Some((_, rest)) => (false, rest),
        None => return Err("not a URL".into()),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h).trim_matches(['[', ']']);
    let address = if authority.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        authority.to_owned()
    } else {
        format!("{authority}:{}", if tls { 443 } else { 80 })
    };
    let tcp = tokio::net::TcpStream::connect(&address).await.map_err(|e| format!("{address}: {e}"))?;
    let request = http::Request::post(path)
        .header(http::header::HOST, authority)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, concat!("fsd-approver/", env!("CARGO_PKG_VERSION")))
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let status = if tls {
        let stream = connect_tls(&hook.roots, host, tcp).await?;
        send(hyper_util::rt::TokioIo::new(stream), request).await?
    } else {
        send(hyper_util::rt::TokioIo::new(tcp), request).await?
    };
    if status.is_success() { Ok(()) } else { Err(format!("the webhook answered {status}")) }
}

async fn send<T>(io: T, request: http::Request<Full<Bytes>>) -> Result<http::StatusCode, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    Ok(response.status())
}

async fn connect_tls(
    roots: &[u8],
    host: &str,
    tcp: tokio::net::TcpStream,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    use rustls_pki_types::pem::PemObject;
    use tokio_rustls::rustls;
    let mut store = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(roots).flatten() {
        let _ = store.add(cert);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(description: &str) -> Entry {
        Entry {
            key: "0123456789abcdef".into(),
            sandbox: "alpha".into(),
            description: description.into(),
            arrived: 1_780_000_000,
            expires: 1_780_000_120,
        }
    }

    /// The notification names what waits, escaped and cut, and carries no byte of content: the
    /// diff, the digest and the version of the description stay out.
    #[test]
    fn a_notification_names_what_waits_and_never_its_content() {
        let long = "x".repeat(250);
        let mut description = format!(
            "fsd escalation v1\nid: 0a\nnonce: 0b\nsession: s1\nclient: uid:0\nmode: danger-full-access\njustification: <why> & \u{202e}{long}\nexpires: 1780000120\n"
        );
        for i in 0..12 {
            description.push_str(&format!(
                "op {}: writeText /etc/f{i}\n  target: host:etc/f{i}\n  current: 1:2:3\n  content-sha256: 00ff\n  diff:\n    +SECRET\n",
                i + 1
            ));
        }
        let sent = payload(&entry(&description), "https://a.example");
        let text = sent.to_string();
        assert!(!text.contains("SECRET") && !text.contains("00ff") && !text.contains("1:2:3"), "{text}");
        let justification = format!("<why> & \\u{{202e}}{}... (66 more bytes not shown)", "x".repeat(184));
        assert_eq!(sent["fsd"]["justification"], justification.as_str());
        assert_eq!(sent["fsd"]["ops"].as_array().unwrap().len(), MAX_OPS);
        assert_eq!(sent["fsd"]["operations"], 12);
        assert_eq!(sent["fsd"]["ops"][0], json!({"op": "writeText", "path": "/etc/f0"}));
        assert_eq!(sent["fsd"]["url"], "https://a.example/r/0123456789abcdef");
        assert_eq!(sent["fsd"]["expires"], "2026-05-28 20:28:40 UTC");
        let listed: Vec<String> = (0..10).map(|i| format!("writeText /etc/f{i}")).collect();
        assert_eq!(
            sent["text"],
            format!(
                "fsd: an escalation waits in sandbox alpha: {}, and 2 more at danger-full-access. Justification: {} <https://a.example/r/0123456789abcdef|Open the approver page>",
                listed.join(", "),
                justification.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
            )
        );
        // Without a page there is no link.
        let unlinked = payload(&entry(&description), "");
        assert_eq!(unlinked["fsd"]["url"], "");
        assert!(!unlinked["text"].as_str().unwrap().contains("Open the approver page"));
    }
}
