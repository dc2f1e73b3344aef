//! The page people approve from: HTTPS (or plain HTTP on loopback), served by the front. It lists
//! every waiting request of every daemon, oldest first, each with the daemon's whole description
//! (escaped by the one escaper of person-facing text, then for HTML; the diff as a diff, every
//! omission on a line of its own as the daemon said it) and approve / deny with a reason. A person
//! logs in with their token (a cookie holds it: HttpOnly, SameSite=Strict, Secure over HTTPS) or
//! sends it as a bearer header. Nothing is fetched from elsewhere: the style and a few lines of
//! script are inline; the script reloads when the queue changes, and the page works without it.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;

use crate::ApproverError;
use crate::front::Front;
use crate::limit::Key;
use crate::link::{Entry, Summary};

/// The cookie that carries a person's token.
const COOKIE: &str = "fsd_approver";
/// The most a form may send.
const MAX_FORM: usize = 64 * 1024;
/// The longest reason kept (the daemon bounds it again before the model sees it).
const MAX_REASON: usize = 1000;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0 auto;max-width:60em;padding:.5em;line-height:1.4}\
header{display:flex;flex-wrap:wrap;gap:.5em;align-items:center;justify-content:space-between}\
h1{font-size:1.3em;margin:.3em 0}h2{font-size:1.1em;margin:.2em 0}\
.request{border:1px solid #999;border-radius:.4em;padding:.6em;margin:.8em 0}\
pre{overflow-x:auto;background:#f6f6f6;padding:.4em;font-size:.85em;white-space:pre}\
.add{color:#064;background:#e6ffed}.del{color:#900;background:#ffeef0}.hunk{color:#05a}\
.omit{color:#7a4b00;font-weight:bold}.warn{color:#b00;font-weight:bold}\
input[type=text],input[type=password]{width:100%;box-sizing:border-box;font-size:1em;padding:.4em}\
button{font-size:1em;padding:.5em 1.2em;margin:.3em .3em 0 0}.approve{background:#2a7;color:#fff}.deny{background:#c33;color:#fff}\
.notice{padding:.5em;border-left:.3em solid #c80;background:#fff8e6}";

/// Reloads when the queue changes, unless the person is typing a reason (then it says so);
/// marks the page as live (`data-live`), which says the page's policy let it run.
const SCRIPT: &str = "(function(){document.documentElement.dataset.live='1';var g=document.body.dataset.generation;setInterval(function(){\
fetch('/generation',{credentials:'same-origin',cache:'no-store'}).then(function(r){return r.ok?r.text():g})\
.then(function(t){if(t.trim()===g)return;var busy=[].some.call(document.querySelectorAll('input[name=reason]'),\
function(i){return i.value!==''||document.activeElement===i});if(busy){document.getElementById('status')\
.textContent='The queue changed: reload to see it.';}else{location.reload();}}).catch(function(){});},2000);})();";

/// Escapes text for HTML (after the person-facing escaper has made it printable ASCII).
fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The TLS side of the page's listener; with `client_ca`, a person may present a client
/// certificate it issued (optional: tokens still log in).
pub fn acceptor(
    cert: &[u8],
    key: &[u8],
    client_ca: Option<&[u8]>,
) -> Result<tokio_rustls::TlsAcceptor, ApproverError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let bad = |what: &str, e: String| ApproverError::Serve(format!("[web] {what}: {e}"));
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| bad("tls_cert", e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad("tls_key", e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("tls", e.to_string()))?;
    let builder = match client_ca {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| bad("client_ca", e.to_string()))?;
                roots.add(cert).map_err(|e| bad("client_ca", e.to_string()))?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| bad("client_ca", e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| bad("tls_cert", e.to_string()))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Accepts connections until the process ends.
pub async fn serve(
    front: Arc<Front>,
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let https = tls.is_some();
    loop {
        let Ok((stream, peer)) = listener.accept().await else { continue };
        let from = peer.ip();
        let front = front.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            // A client certificate the handshake verified names a person for the connection.
            let service_for = |front: Arc<Front>, certified: Option<String>| {
                hyper::service::service_fn(move |request| {
                    let front = front.clone();
                    let certified = certified.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            handle(&front, request, https, certified, from).await,
                        )
                    }
                })
            };
            // A client that never finishes its request's head is dropped, not kept.
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(20));
            match tls {
                Some(tls) => {
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(std::time::Duration::from_secs(10), tls.accept(stream)).await
                    {
                        let names = stream
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .map(certificate_names);
                        let certified = names.and_then(|n| front.person_of_certificate(&n));
                        let service = service_for(front, certified);
                        let _ = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                    }
                }
                None => {
                    let service = service_for(front, None);
                    let _ = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
                }
            }
        });
    }
}

type Page = Response<Full<Bytes>>;

/// A response with the headers every answer of the page carries: nothing loads from elsewhere,
/// nothing is cached, nothing embeds the page.
fn respond(status: StatusCode, content_type: &str, body: String) -> Page {
    // The inline style and script are allowed by their hashes, nothing else inline.
    let hash = |text: &str| {
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            fsd_proto::digest::content(text.as_bytes()),
        )
    };
    let policy = format!(
        "default-src 'none'; style-src 'sha256-{}'; script-src 'sha256-{}'; connect-src 'self'; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        hash(STYLE),
        hash(SCRIPT)
    );
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    let set = |value: &str| http::HeaderValue::from_str(value).unwrap_or(http::HeaderValue::from_static(""));
    headers.insert(header::CONTENT_TYPE, set(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, set(&policy));
    headers.insert(header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, http::HeaderValue::from_static("nosniff"));
    // Not `no-referrer`: under it a browser sends `Origin: null` with the page's own forms.
    headers.insert(header::REFERRER_POLICY, http::HeaderValue::from_static("same-origin"));
    headers.insert(header::X_FRAME_OPTIONS, http::HeaderValue::from_static("DENY"));
    response
}

fn document(title: &str, generation: Option<u64>, body: &str) -> String {
    let data = generation.map(|g| format!(" data-generation=\"{g}\"")).unwrap_or_default();
    let script = if generation.is_some() { format!("<script>{SCRIPT}</script>") } else { String::new() };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body{data}>\n{body}\n{script}</body></html>\n",
        html(title)
    )
}

fn redirect(to: &str, cookie: Option<String>) -> Page {
    let mut response = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", String::new());
    if let Ok(to) = http::HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, to);
    }
    if let Some(cookie) = cookie.and_then(|c| http::HeaderValue::from_str(&c).ok()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// `application/x-www-form-urlencoded` (a query string too) as pairs.
fn form(text: &str) -> Vec<(String, String)> {
    let decode =
        |s: &str| percent_encoding::percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned();
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn get<'a>(pairs: &'a [(String, String)], name: &str) -> &'a str {
    pairs.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str())
}

/// Where a request's token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carrier {
    Bearer,
    Cookie,
}

/// The token a request carries: a bearer header, else the page's cookie.
fn token(request: &http::Request<Incoming>) -> Option<(String, Carrier)> {
    let headers = request.headers();
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some((bearer.trim().to_owned(), Carrier::Bearer));
    }
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).find_map(|cookies| {
        cookies.split(';').find_map(|c| {
            c.trim().strip_prefix(&format!("{COOKIE}=")).map(|t| (t.to_owned(), Carrier::Cookie))
        })
    })
}

/// The answer to a login refused by the rate limit: `429`, saying when to try again.
fn too_many(wait: std::time::Duration, page: Page) -> Page {
    let mut response = page;
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    response.headers_mut().insert(header::RETRY_AFTER, http::HeaderValue::from(seconds));
    response
}

/// What a refused login is told, with the seconds until it may try again.
fn too_many_text(wait: std::time::Duration) -> String {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    format!("Too many failed logins from this address or for this person: try again in {seconds} s.")
}

/// Where a login may send the browser next: a path of this page, never another site's address
/// (a browser reads `/\\host` as `//host`, so a backslash is refused too).
fn local(next: &str) -> &str {
    if next.starts_with('/') && !next.starts_with("//") && !next.contains('\\') { next } else { "/" }
}

/// Whether a state-changing request comes from this page: a browser names the page's own origin
/// (or sends none, as a script with a bearer token does); another site's form is refused.
fn same_origin(request: &http::Request<Incoming>, https: bool) -> bool {
    let headers = request.headers();
    if headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) == Some("cross-site") {
        return false;
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else { return true };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("");
    let scheme = if https { "https" } else { "http" };
    origin == format!("{scheme}://{host}")
}

async fn body(request: http::Request<Incoming>) -> Option<String> {
    let collected = Limited::new(request.into_body(), MAX_FORM).collect().await.ok()?;
    String::from_utf8(collected.to_bytes().to_vec()).ok()
}

/// The names a verified client certificate answers to: its DNS, e-mail and URI SANs, then its
/// subject CNs.
pub(crate) fn certificate_names(der: &rustls_pki_types::CertificateDer<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der.as_ref()) else { return Vec::new() };
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(n) | GeneralName::RFC822Name(n) | GeneralName::URI(n) => {
                    names.push((*n).to_owned())
                }
                _ => {}
            }
        }
    }
    names.extend(cert.subject().iter_common_name().filter_map(|cn| cn.as_str().ok().map(str::to_owned)));
    names
}

/// The cookie that forgets a token.
fn no_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

async fn handle(
    front: &Front,
    request: http::Request<Incoming>,
    https: bool,
    certified: Option<String>,
    from: std::net::IpAddr,
) -> Page {
    let now = std::time::Instant::now();
    let address = Key::address(from);
    // Every token presented counts: a wrong one is a failed login, whichever way it came, and
    // while this address may not log in no token is even looked at.
    let presented = token(&request);
    if presented.is_some()
        && let Some(wait) = front.logins.refused(std::slice::from_ref(&address), now)
    {
        return too_many(wait, message(StatusCode::TOO_MANY_REQUESTS, "Not now", &too_many_text(wait)));
    }
    let known = presented.as_ref().and_then(|(t, _)| front.person(t).map(str::to_owned));
    if presented.is_some() && known.is_none() {
        front.logins.failed(std::slice::from_ref(&address), now);
    }
    // A cookie of a token no longer known (the config changed) is forgotten, not sent again.
    let forget = matches!(presented, Some((_, Carrier::Cookie))) && known.is_none();
    // A token names the person first (one may log in as another on a shared machine); else
    // the connection's certificate.
    let person = known.or(certified);
    let mut page = route(front, request, https, person, (address, now)).await;
    if forget
        && !page.headers().contains_key(header::SET_COOKIE)
        && let Ok(cookie) = http::HeaderValue::from_str(&no_cookie())
    {
        page.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    page
}

async fn route(
    front: &Front,
    request: http::Request<Incoming>,
    https: bool,
    person: Option<String>,
    (address, now): (Key, std::time::Instant),
) -> Page {
    let path = request.uri().path().to_owned();
    let query = form(request.uri().query().unwrap_or(""));
    match (request.method().clone(), path.as_str()) {
        (Method::POST, "/login") => {
            let pairs = form(&body(request).await.unwrap_or_default());
            let next = get(&pairs, "next");
            let next = local(next);
            // The person named, when one of the config is: failures count against them too.
            let name = get(&pairs, "name").trim();
            let mut keys = vec![address];
            if front.config.people.iter().any(|p| p.name == name) {
                keys.push(Key::Person(name.to_owned()));
            }
            if let Some(wait) = front.logins.refused(&keys, now) {
                return too_many(
                    wait,
                    login(StatusCode::TOO_MANY_REQUESTS, next, Some(&too_many_text(wait))),
                );
            }
            let token = get(&pairs, "token");
            match front.person(token) {
                Some(p) if name.is_empty() || p == name => {
                    let secure = if https { "; Secure" } else { "" };
                    let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}");
                    redirect(next, Some(cookie))
                }
                _ => {
                    front.logins.failed(&keys, now);
                    login(
                        StatusCode::FORBIDDEN,
                        next,
                        Some("That token is not known here (or not for that name)."),
                    )
                }
            }
        }
        (Method::POST, "/logout") => redirect("/", Some(no_cookie())),
        (Method::GET, "/generation") => match person {
            Some(_) => {
                respond(StatusCode::OK, "text/plain; charset=utf-8", front.generation.borrow().to_string())
            }
            None => respond(StatusCode::UNAUTHORIZED, "text/plain; charset=utf-8", "log in first\n".into()),
        },
        (Method::POST, "/decide") => {
            let Some(person) = person else {
                return login(StatusCode::UNAUTHORIZED, "/", Some("Log in to decide."));
            };
            if !same_origin(&request, https) {
                return message(StatusCode::FORBIDDEN, "Refused", "A decision must be sent from this page.");
            }
            let pairs = form(&body(request).await.unwrap_or_default());
            let key = get(&pairs, "key").to_owned();
            let approve = match get(&pairs, "decision") {
                "approve" => true,
                "deny" => false,
                _ => return message(StatusCode::BAD_REQUEST, "Refused", "Choose approve or deny."),
            };
            let reason: String = get(&pairs, "reason").trim().chars().take(MAX_REASON).collect();
            let what = if approve { "Approved" } else { "Denied" };
            match front.decide(key.clone(), person, approve, reason).await {
                None => message(
                    StatusCode::OK,
                    what,
                    &format!("You decided request {key}: {}.", what.to_lowercase()),
                ),
                Some(why) => message(StatusCode::CONFLICT, "Not decided", &why),
            }
        }
        (Method::GET, "/") => match person {
            Some(person) => queue(front, &person, |e| {
                let session = get(&query, "session");
                session.is_empty()
                    || Summary::of(&e.description).session == fsd_proto::names::for_people(session)
            }),
            None => {
                let next = request.uri().path_and_query().map_or("/", |p| p.as_str());
                login(StatusCode::OK, next, None)
            }
        },
        (Method::GET, p) if p.starts_with("/r/") => match person {
            Some(person) => {
                // By its key (the webhook's link) or by the id of the call that asked (an MCP
                // client's link, sent before the daemon has described the request).
                let name = percent_encoding::percent_decode_str(&p[3..]).decode_utf8_lossy().into_owned();
                let call = fsd_proto::names::for_people(&name);
                queue(front, &person, |e| {
                    e.key == name || (!name.is_empty() && Summary::of(&e.description).call == call)
                })
            }
            None => login(StatusCode::OK, &path, None),
        },
        _ => message(StatusCode::NOT_FOUND, "Not found", "There is nothing here."),
    }
}

fn message(status: StatusCode, title: &str, text: &str) -> Page {
    let body = format!(
        "<h1>{}</h1>\n<p id=\"outcome\">{}</p>\n<p><a href=\"/\">Back to the waiting requests</a></p>",
        html(title),
        html(text)
    );
    respond(status, "text/html; charset=utf-8", document(title, None, &body))
}

fn login(status: StatusCode, next: &str, notice: Option<&str>) -> Page {
    let notice = notice.map(|n| format!("<p class=\"notice\">{}</p>", html(n))).unwrap_or_default();
    let body = format!(
        "<h1>fsd approvals</h1>\n{notice}<form method=\"post\" action=\"/login\">\
         <input type=\"hidden\" name=\"next\" value=\"{}\">\
         <label>Your name (optional) <input type=\"text\" name=\"name\" autocomplete=\"username\"></label>\
         <label>Your token <input type=\"password\" name=\"token\" autocomplete=\"current-password\"></label>\
         <button type=\"submit\">Log in</button></form>",
        html(next)
    );
    respond(status, "text/html; charset=utf-8", document("fsd approvals: log in", None, &body))
}

/// The class of a description line on the page.
fn class(line: &str) -> Option<&'static str> {
    if line.starts_with(crate::UNBOUND_WARNING) {
        Some("warn")
    } else if line.starts_with("    !") || line.starts_with("justification-not-shown:") {
        Some("omit")
    } else if line.starts_with("    @@") {
        Some("hunk")
    } else if line.starts_with("    +") {
        Some("add")
    } else if line.starts_with("    -") {
        Some("del")
    } else {
        None
    }
}

/// The description as the page shows it: the terminal's text (expiry as a time, unbound content
/// marked, everything escaped by the one escaper), each line then escaped for HTML and marked.
pub fn description_html(text: &str, now: u64) -> String {
    let shown = crate::printable(&crate::for_people(text, now));
    let mut out = String::new();
    for line in shown.lines() {
        match class(line) {
            Some(c) => out.push_str(&format!("<span class=\"{c}\">{}</span>\n", html(line))),
            None => out.push_str(&format!("{}\n", html(line))),
        }
    }
    out
}

fn request(entry: &Entry, now: u64) -> String {
    let summary = Summary::of(&entry.description);
    let show = |s: &str| html(&fsd_proto::names::for_people(s));
    let sandbox = if entry.sandbox.is_empty() { "(unnamed daemon)".to_owned() } else { show(&entry.sandbox) };
    let ops: String = summary
        .ops
        .iter()
        .map(|(op, path)| format!("<li>{} <code>{}</code></li>", show(op), show(path)))
        .collect();
    format!(
        "<section class=\"request\" id=\"r-{key}\">\n<h2>{sandbox}: {mode}</h2>\n\
         <p>Request <a href=\"/r/{key}\">{key}</a> from {client}, session {session}; \
         arrived {arrived}, expires {expires} (in {left} s).</p>\n<ul>{ops}</ul>\n\
         <p>Justification: {justification}</p>\n\
         <details open><summary>The daemon's whole description</summary><pre>{description}</pre></details>\n\
         <form method=\"post\" action=\"/decide\"><input type=\"hidden\" name=\"key\" value=\"{key}\">\
         <label>Reason (optional, shown to the agent) <input type=\"text\" name=\"reason\" maxlength=\"{MAX_REASON}\"></label>\
         <button type=\"submit\" name=\"decision\" value=\"approve\" class=\"approve\">Approve</button>\
         <button type=\"submit\" name=\"decision\" value=\"deny\" class=\"deny\">Deny</button></form>\n</section>\n",
        key = html(&entry.key),
        mode = show(&summary.mode),
        client = show(&summary.client),
        session = show(&summary.session),
        arrived = crate::utc(entry.arrived),
        expires = crate::utc(entry.expires),
        left = entry.expires.saturating_sub(now),
        justification = show(&summary.justification),
        description = description_html(&entry.description, now),
    )
}

fn queue(front: &Front, person: &str, shown: impl Fn(&Entry) -> bool) -> Page {
    let generation = *front.generation.borrow();
    let now = crate::now_secs();
    let entries: Vec<Entry> = front
        .queue
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter(|e| shown(e))
        .cloned()
        .collect();
    let status = match entries.len() {
        0 => "Nothing waits here now.".to_owned(),
        1 => "1 request waits.".to_owned(),
        n => format!("{n} requests wait, oldest first."),
    };
    let requests: String = entries.iter().map(|e| request(e, now)).collect();
    let body = format!(
        "<header><h1>fsd approvals</h1><span>Logged in as {}</span>\
         <form method=\"post\" action=\"/logout\"><button type=\"submit\">Log out</button></form></header>\n\
         <p id=\"status\">{status} <noscript>Reload to see new requests.</noscript> <a href=\"/\">All waiting requests</a></p>\n{requests}",
        html(person)
    );
    let title = format!("fsd approvals ({} waiting)", entries.len());
    respond(StatusCode::OK, "text/html; charset=utf-8", document(&title, Some(generation), &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The description on the page: the diff as a diff (each kind of line marked), every
    /// omission marked as the daemon said it, unbound content warned of, markup and controls
    /// escaped (the one escaper first, then HTML).
    #[test]
    fn the_page_shows_the_diff_as_a_diff_and_escapes_everything() {
        let description = "fsd escalation v1\nmode: danger-full-access\njustification: <script>x</script>\njustification-not-shown: 5 more bytes\nexpires: 1780000120\nop 1: writeText /etc/a\n  target: host:etc/a\n  content-sha256: 00\n  diff (partial preview: the lines starting with ! say what is not shown; content-sha256 binds the whole change):\n    @@ -1 +1 @@\n    -old\n    +new\u{1b}[2J & \"q\"\n    ! 7 more diff lines not shown\nop 2: writeText /etc/b\n  target: host:etc/b\n";
        assert_eq!(
            description_html(description, 1_780_000_000),
            "fsd escalation v1\nmode: danger-full-access\njustification: &lt;script&gt;x&lt;/script&gt;\n\
             <span class=\"omit\">justification-not-shown: 5 more bytes</span>\n\
             expires: 2026-05-28 20:28:40 UTC (in 120 s)\nop 1: writeText /etc/a\n  target: host:etc/a\n  content-sha256: 00\n\
             \x20 diff (partial preview: the lines starting with ! say what is not shown; content-sha256 binds the whole change):\n\
             <span class=\"hunk\">    @@ -1 +1 @@</span>\n<span class=\"del\">    -old</span>\n\
             <span class=\"add\">    +new\\u{1b}[2J &amp; &quot;q&quot;</span>\n\
             <span class=\"omit\">    ! 7 more diff lines not shown</span>\nop 2: writeText /etc/b\n\
             <span class=\"warn\">  content: NOT BOUND: approving lets this call write any content</span>\n  target: host:etc/b\n"
        );
    }

    #[test]
    fn a_login_sends_the_browser_only_to_this_page() {
        for (next, to) in [
            ("/?session=s-1", "/?session=s-1"),
            ("/r/0123", "/r/0123"),
            ("//evil.example/", "/"),
            ("/\\evil.example/", "/"),
            ("https://evil.example/", "/"),
            ("", "/"),
        ] {
            assert_eq!(local(next), to, "{next}");
        }
    }

    #[test]
    fn forms_and_queries_decode() {
        let pairs = form("key=ab&decision=deny&reason=not+on+Fridays%21&empty");
        assert_eq!(get(&pairs, "reason"), "not on Fridays!");
        assert_eq!(get(&pairs, "decision"), "deny");
        assert_eq!(get(&pairs, "empty"), "");
        assert_eq!(get(&pairs, "missing"), "");
    }
}
