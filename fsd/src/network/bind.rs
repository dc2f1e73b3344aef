//! The network process's listeners: each bound before anything else may fail, Unix sockets in
//! a private directory until every listener is ready, then published at their paths together.

use crate::config::Listen;
use crate::daemon::DaemonError;
use crate::sys::socket::SocketAccess;

pub(super) enum Bound {
    Unix(std::os::unix::net::UnixListener, String),
    Tcp(std::net::TcpListener, String),
    /// The REST face and gRPC-Web (`crate::rest`).
    HttpUnix(std::os::unix::net::UnixListener, String),
    /// `true`: plaintext whatever TLS is configured (`http+plain:`, loopback only).
    Http(std::net::TcpListener, String, bool),
    /// `http+pod:`: plaintext on the pod network, behind the agent-sandbox router; the
    /// address it was configured with (`pod_network_tokens` names listeners by it, port 0 too).
    HttpPod(std::net::TcpListener, String, std::net::SocketAddr),
}

/// A listener bound; a Unix socket not yet at its path (see [`Published::publish`]).
pub(super) enum Binding {
    Ready(Bound),
    Unix { pending: crate::sys::socket::Pending, path: std::path::PathBuf, name: String, http: bool },
}

/// The socket files this process put at their paths during a start that has not finished: a
/// start that fails after them (its confinement) removes them again, so a failed start leaves
/// no socket file behind. The supervisor cannot do it: it cannot tell our socket from another
/// daemon's that made this start fail.
#[derive(Default)]
pub(super) struct Published {
    paths: Vec<std::path::PathBuf>,
}

impl Published {
    /// Puts a Unix socket at its path. Called for every listener in a row once all are bound,
    /// so a client that finds a socket finds every listener ready.
    pub(super) fn publish(&mut self, binding: Binding) -> Result<Bound, DaemonError> {
        match binding {
            Binding::Ready(bound) => Ok(bound),
            Binding::Unix { pending, path, name, http } => {
                let listener =
                    pending.publish().map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
                self.paths.push(path);
                listener
                    .set_nonblocking(true)
                    .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
                Ok(if http { Bound::HttpUnix(listener, name) } else { Bound::Unix(listener, name) })
            }
        }
    }

    /// The start succeeded: the sockets stay until the supervisor removes them at shutdown.
    pub(super) fn keep(mut self) {
        self.paths.clear();
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        for path in &self.paths {
            let _ = std::fs::remove_file(path);
        }
    }
}

pub(super) fn bind(listen: &Listen, access: SocketAccess) -> Result<Binding, DaemonError> {
    let name = listen.to_string();
    let bind_err = |source| DaemonError::Bind { listen: name.clone(), source };
    let unix = |path: &std::path::Path, http: bool| -> Result<Binding, DaemonError> {
        crate::daemon::clear_stale_socket(path)?;
        // Mode and group are in place before the path exists (see `sys::socket`). Only giving
        // the socket its group can be EPERM (mkdir and bind refuse with EACCES): say which key.
        let pending = crate::sys::socket::bind_unix(path, access).map_err(|source| match access.gid {
            Some(gid) if source.raw_os_error() == Some(crate::sys::Errno::PERM.raw_os_error()) => {
                DaemonError::SocketGroup { listen: name.clone(), gid, source }
            }
            _ => bind_err(source),
        })?;
        Ok(Binding::Unix { pending, path: path.to_owned(), name: name.clone(), http })
    };
    let tcp = |addr: &std::net::SocketAddr| -> Result<std::net::TcpListener, DaemonError> {
        let listener = std::net::TcpListener::bind(addr).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        Ok(listener)
    };
    // Port 0 asks the kernel for one: the logs name the port actually bound.
    let bound = |listener: &std::net::TcpListener, as_listen: fn(std::net::SocketAddr) -> Listen| {
        listener.local_addr().map(|a| as_listen(a).to_string()).unwrap_or_else(|_| name.clone())
    };
    match listen {
        Listen::Unix(path) => unix(path, false),
        Listen::Tcp(addr) => {
            let listener = tcp(addr)?;
            let name = bound(&listener, Listen::Tcp);
            Ok(Binding::Ready(Bound::Tcp(listener, name)))
        }
        Listen::HttpUnix(path) => unix(path, true),
        Listen::HttpPod(addr) => {
            let listener = tcp(addr)?;
            let name = bound(&listener, Listen::HttpPod);
            Ok(Binding::Ready(Bound::HttpPod(listener, name, *addr)))
        }
        Listen::Http(addr) | Listen::HttpPlain(addr) => {
            let plain = matches!(listen, Listen::HttpPlain(_));
            let listener = tcp(addr)?;
            let name = bound(&listener, if plain { Listen::HttpPlain } else { Listen::Http });
            Ok(Binding::Ready(Bound::Http(listener, name, plain)))
        }
    }
}
