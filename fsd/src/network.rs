//! The network process: binds the listeners, opens the audit log, reads the TLS files, then
//! confines itself to no filesystem rights at all before any thread starts; serves gRPC (fsd.v1,
//! grpc.health.v1 and server reflection, behind the identity edge) and routes every call to a
//! worker of the call's mode.

use std::collections::BTreeSet;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use fsd_proto::v1::fsd_server::FsdServer;
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;

use crate::audit::Audit;
use crate::backend::Mode;
use crate::config::{Config, Listen};
use crate::daemon::DaemonError;
use crate::dispatch::Dispatcher;
use crate::edge::{Edge, TcpLimits};
use crate::ipc::{self, Control, ControlRequest, IpcError};
use crate::service::FsdService;

enum Bound {
    Unix(std::os::unix::net::UnixListener, String),
    Tcp(std::net::TcpListener, String),
}

fn bind(listen: &Listen) -> Result<Bound, DaemonError> {
    let name = listen.to_string();
    let bind_err = |source| DaemonError::Bind { listen: name.clone(), source };
    match listen {
        Listen::Unix(path) => {
            crate::daemon::clear_stale_socket(path)?;
            let listener = std::os::unix::net::UnixListener::bind(path).map_err(bind_err)?;
            crate::daemon::set_socket_mode(path).map_err(bind_err)?;
            listener.set_nonblocking(true).map_err(bind_err)?;
            Ok(Bound::Unix(listener, name))
        }
        Listen::Tcp(addr) => {
            let listener = std::net::TcpListener::bind(addr).map_err(bind_err)?;
            listener.set_nonblocking(true).map_err(bind_err)?;
            Ok(Bound::Tcp(listener, name))
        }
    }
}

pub fn run(config: Config, control: UnixStream) -> Result<(), DaemonError> {
    let started = match start(&config, &control) {
        Ok(started) => started,
        Err(e) => {
            // The supervisor reports it, once; this process says nothing more.
            if ipc::send(&control, &ControlRequest::StartFailed { reason: e.to_string() }, None).is_ok() {
                return Err(DaemonError::Reported);
            }
            return Err(e);
        }
    };
    ipc::send(&control, &ControlRequest::Listening, None)?;
    let Started { listeners, audit, roots, control_reader } = started;

    let dispatcher = Arc::new(Dispatcher::new(config.call_timeout, control));
    let (stop_tx, stop_rx) = watch::channel(false);
    let (unavailable_tx, unavailable_rx) = watch::channel(BTreeSet::new());
    let supervisor_gone = stop_tx.clone();
    {
        let dispatcher = dispatcher.clone();
        std::thread::Builder::new()
            .name("fsd-control".into())
            .spawn(move || serve_control(&dispatcher, &control_reader, &supervisor_gone, &unavailable_tx))
            .map_err(DaemonError::Runtime)?;
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("fsd-net")
        .build()
        .map_err(DaemonError::Runtime)?;
    // The stop signals are ours from now on, also while the workers come up.
    let signals = {
        let _entered = runtime.enter();
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            term: signal(SignalKind::terminate()).map_err(DaemonError::Signal)?,
            int: signal(SignalKind::interrupt()).map_err(DaemonError::Signal)?,
        }
    };
    dispatcher.wait_ready(&config.served_modes(), config.workers_per_mode, Duration::from_secs(10));
    let service = FsdService::new(dispatcher, &config, roots, audit);
    let health = Health { modes: config.served_modes(), unavailable: unavailable_rx };
    let served = runtime.block_on(serve(config, service, listeners, health, signals, (stop_tx, stop_rx)));
    // Calls still blocked on a stuck worker must not hold the exit: the supervisor kills that
    // worker once this process is gone.
    runtime.shutdown_timeout(Duration::from_millis(100));
    served
}

/// SIGTERM and SIGINT, registered before the workers are waited for.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

/// What the network process holds once its start-up steps succeeded.
struct Started {
    listeners: Listeners,
    audit: Option<Arc<Audit>>,
    roots: Vec<(String, bool)>,
    control_reader: UnixStream,
}

/// Every step that needs the filesystem or may fail on the configuration, then confinement.
fn start(config: &Config, control: &UnixStream) -> Result<Started, DaemonError> {
    let bound = config.listen.iter().map(bind).collect::<Result<Vec<_>, _>>()?;
    let audit = match &config.audit_log {
        Some(path) => Some(Arc::new(
            Audit::open(path).map_err(|source| DaemonError::Audit { path: path.clone(), source })?,
        )),
        None => None,
    };
    let roots = config
        .roots
        .iter()
        .map(|r| {
            let path = std::fs::canonicalize(&r.path).unwrap_or_else(|_| r.path.clone());
            (crate::backend::resolve::path_string(&path), r.writable)
        })
        .collect::<Vec<_>>();
    let control_reader = control.try_clone().map_err(DaemonError::Runtime)?;
    // The TLS files are read now: after confinement this process cannot open them.
    let tls = match &config.tls {
        Some(tls) => Some(tokio_rustls::TlsAcceptor::from(crate::tls::server_config(tls)?)),
        None => None,
    };
    let health_listener = match config.health_listen {
        Some(addr) => {
            let listener = std::net::TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|source| DaemonError::Bind { listen: format!("health tcp:{addr}"), source })?;
            Some(listener)
        }
        None => None,
    };
    let instance = instance_id()?;
    let edge = Edge::new(&instance, config.tokens.clone())
        .map_err(|e| DaemonError::Runtime(std::io::Error::other(e)))?;

    let confinement = crate::confine::network(config).map_err(DaemonError::Confine)?;
    tracing::info!(fence = confinement.describe(), "network process confined: no filesystem rights");
    tracing::info!(instance = %instance, "daemon instance");
    let listeners = Listeners { bound, tls, health: health_listener, edge };
    Ok(Started { listeners, audit, roots, control_reader })
}

/// A random id of this network process's life: clients pin it, so a restarted daemon refuses
/// the sessions of the one before instead of serving them as if nothing happened.
fn instance_id() -> Result<String, DaemonError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| DaemonError::Runtime(std::io::Error::other(e.to_string())))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What `serve` serves on.
struct Listeners {
    bound: Vec<Bound>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    health: Option<std::net::TcpListener>,
    edge: Edge,
}

/// Registers the workers the supervisor starts, until the supervisor goes away.
fn serve_control(
    dispatcher: &Arc<Dispatcher>,
    control: &UnixStream,
    stop: &watch::Sender<bool>,
    unavailable: &watch::Sender<BTreeSet<Mode>>,
) {
    loop {
        match ipc::recv::<Control>(control) {
            Ok((Control::Worker { mode, pid }, Some(fd))) => {
                let dispatcher = dispatcher.clone();
                let socket = UnixStream::from(fd);
                // Waiting for the worker's ready message must not hold up the next one.
                let spawned = std::thread::Builder::new()
                    .name("fsd-register".into())
                    .spawn(move || dispatcher.add_worker(mode, pid, socket));
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot register a worker");
                }
            }
            Ok((Control::Worker { pid, .. }, None)) => {
                tracing::error!(pid, "worker announced without its socket")
            }
            Ok((Control::Unavailable { mode, reason }, _)) => {
                tracing::error!(mode = mode.as_str(), %reason, "mode unavailable");
                dispatcher.mark_unavailable(mode, reason);
                unavailable.send_modify(|modes| {
                    modes.insert(mode);
                });
            }
            Err(IpcError::Closed) => {
                tracing::info!("supervisor gone: shutting down");
                let _ = stop.send(true);
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "control channel failed: shutting down");
                let _ = stop.send(true);
                return;
            }
        }
    }
}

/// The modes health reports on, and the ones the supervisor gave up on.
struct Health {
    modes: Vec<Mode>,
    unavailable: watch::Receiver<BTreeSet<Mode>>,
}

/// The health service name of one mode: `fsd.v1.Fsd/<mode>`.
pub fn mode_health_name(mode: Mode) -> String {
    format!("{}/{}", <FsdServer<FsdService> as tonic::server::NamedService>::NAME, mode.as_str())
}

/// Health statuses for the modes served and those given up: each mode's own name, and the
/// overall ("") and `fsd.v1.Fsd` names, SERVING only while every served mode is.
fn health_statuses(modes: &[Mode], unavailable: &BTreeSet<Mode>) -> Vec<(String, bool)> {
    let all = modes.iter().all(|m| !unavailable.contains(m));
    let fsd = <FsdServer<FsdService> as tonic::server::NamedService>::NAME;
    let mut out = vec![(String::new(), all), (fsd.to_owned(), all)];
    out.extend(modes.iter().map(|m| (mode_health_name(*m), !unavailable.contains(m))));
    out
}

async fn report_health(reporter: &tonic_health::server::HealthReporter, statuses: Vec<(String, bool)>) {
    for (name, serving) in statuses {
        let status = if serving {
            tonic_health::ServingStatus::Serving
        } else {
            tonic_health::ServingStatus::NotServing
        };
        reporter.set_service_status(name, status).await;
    }
}

async fn serve(
    config: Config,
    service: FsdService,
    listeners: Listeners,
    health: Health,
    mut signals: Signals,
    (stop_tx, stop_rx): (watch::Sender<bool>, watch::Receiver<bool>),
) -> Result<(), DaemonError> {
    let Listeners { bound, tls, health: health_listener, edge } = listeners;
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let Health { modes, mut unavailable } = health;
    report_health(&reporter, health_statuses(&modes, &unavailable.borrow_and_update())).await;
    {
        // A mode the supervisor gives up on later turns its names (and the overall) NOT_SERVING.
        let (reporter, modes, mut stop) = (reporter.clone(), modes.clone(), stop_rx.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    changed = unavailable.changed() => if changed.is_err() { return },
                    _ = stop.wait_for(|s| *s) => return,
                }
                let statuses = health_statuses(&modes, &unavailable.borrow_and_update());
                report_health(&reporter, statuses).await;
            }
        });
    }
    // Reflection answers from the descriptor sets the services were compiled from, and lists
    // only the services this listener serves (the descriptor set also holds fsd.approver.v1).
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(fsd_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name(<FsdServer<FsdService> as tonic::server::NamedService>::NAME)
            .with_service_name("grpc.health.v1.Health")
            .with_service_name("grpc.reflection.v1.ServerReflection")
            .with_service_name("grpc.reflection.v1alpha.ServerReflection")
    };
    let reflection_v1 = reflection().build_v1().map_err(|e| DaemonError::Reflection(e.to_string()))?;
    let reflection_v1alpha =
        reflection().build_v1alpha().map_err(|e| DaemonError::Reflection(e.to_string()))?;
    let transport = config.transport;
    let tcp_limits = TcpLimits {
        handshake_timeout: transport.handshake_timeout,
        idle_timeout: transport.idle_timeout,
        max_connections: transport.max_connections,
        tcp_keepalive: transport.keepalive_interval,
    };
    let mut servers = tokio::task::JoinSet::new();
    for listener in bound {
        let max = config.max_message_bytes as usize;
        let svc =
            FsdServer::new(service.clone()).max_decoding_message_size(max).max_encoding_message_size(max);
        // Request compression is never accepted (no `accept_compressed`, no codec compiled in):
        // a compressed request is refused before it is inflated.
        let router = tonic::transport::Server::builder()
            // Large windows and frames: tonic's defaults cost streaming several times over here.
            .initial_stream_window_size(16 << 20)
            .initial_connection_window_size(32 << 20)
            .max_frame_size((1 << 20) - 1)
            // Explicit limits, not library defaults (tonic's `None` would lift hyper's).
            .max_concurrent_streams(transport.max_concurrent_streams)
            .concurrency_limit_per_connection(transport.max_calls_per_connection)
            .http2_keepalive_interval(Some(transport.keepalive_interval))
            .http2_keepalive_timeout(Some(transport.keepalive_timeout))
            .http2_max_header_list_size(16 << 10)
            .http2_max_pending_accept_reset_streams(Some(20))
            .http2_max_local_error_reset_streams(Some(1024))
            .layer(edge.clone())
            .add_service(svc)
            .add_service(health_service.clone())
            .add_service(reflection_v1.clone())
            .add_service(reflection_v1alpha.clone());
        let mut stop = stop_rx.clone();
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        match listener {
            Bound::Unix(std_listener, name) => {
                let listener = tokio::net::UnixListener::from_std(std_listener)
                    .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
                tracing::info!(listen = %name, "listening");
                servers.spawn(async move {
                    let result = router
                        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
                        .await;
                    result.map_err(|source| DaemonError::Serve { listen: name, source })
                });
            }
            Bound::Tcp(std_listener, name) => {
                let listener = tokio::net::TcpListener::from_std(std_listener)
                    .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
                if tls.is_some() {
                    tracing::info!(listen = %name, tls = true, "listening");
                } else {
                    // Any local user (and any container sharing this network namespace) can
                    // connect here: its clients are one identity, `tcp`, capped at this mode.
                    let max = config
                        .client_max_modes
                        .get(&crate::identity::ClientKey::Tcp)
                        .copied()
                        .unwrap_or(crate::identity::TCP_DEFAULT_MAX);
                    tracing::warn!(
                        listen = %name,
                        tls = false,
                        identity = "tcp",
                        max_mode = max.as_str(),
                        "listening on plaintext loopback TCP: every local user may connect (client_max_modes key \"tcp\")"
                    );
                }
                let incoming = crate::edge::incoming(listener, tls.clone(), tcp_limits, stop_rx.clone());
                servers.spawn(async move {
                    let result = router.serve_with_incoming_shutdown(incoming, shutdown).await;
                    result.map_err(|source| DaemonError::Serve { listen: name, source })
                });
            }
        }
    }
    if let Some(std_listener) = health_listener {
        let name =
            std_listener.local_addr().map(|a| format!("health tcp:{a}")).unwrap_or_else(|_| "health".into());
        let listener = tokio::net::TcpListener::from_std(std_listener)
            .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
        tracing::info!(listen = %name, "listening (grpc.health.v1 only, plaintext)");
        // Health only: no fsd.v1, no reflection, nothing that needs a credential.
        let router = tonic::transport::Server::builder()
            .max_concurrent_streams(16)
            .concurrency_limit_per_connection(4)
            .http2_max_header_list_size(8 << 10)
            .add_service(health_service.clone());
        let incoming = crate::edge::incoming(
            listener,
            None,
            TcpLimits { max_connections: 64, ..tcp_limits },
            stop_rx.clone(),
        );
        let mut stop = stop_rx.clone();
        servers.spawn(async move {
            let shutdown = async move {
                let _ = stop.wait_for(|s| *s).await;
            };
            let result = router.serve_with_incoming_shutdown(incoming, shutdown).await;
            result.map_err(|source| DaemonError::Serve { listen: name, source })
        });
    }
    let mut stopped = stop_rx.clone();
    let mut failure = None;
    tokio::select! {
        _ = signals.int.recv() => tracing::info!("SIGINT: finishing in-flight calls"),
        _ = signals.term.recv() => tracing::info!("SIGTERM: finishing in-flight calls"),
        _ = stopped.wait_for(|s| *s) => {}
        Some(done) = servers.join_next() => {
            if let Ok(Err(e)) = done { failure = Some(e); }
        }
    }
    let stopping = health_statuses(&modes, &BTreeSet::new()).into_iter().map(|(name, _)| (name, false));
    report_health(&reporter, stopping.collect()).await;
    let _ = stop_tx.send(true);
    // In-flight calls get most of the grace (the supervisor needs the rest to stop the
    // workers); a client that keeps an idle connection open does not hold the daemon up past it.
    let drain = async {
        while let Some(done) = servers.join_next().await {
            if let Ok(Err(e)) = done {
                failure.get_or_insert(e);
            }
        }
    };
    if tokio::time::timeout(drain_budget(config.shutdown_grace), drain).await.is_err() {
        tracing::warn!("connections still open after the grace period; closing them");
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The network process's share of `shutdown_grace`: all but a fifth (at most a second), which
/// the supervisor keeps for stopping the workers.
fn drain_budget(grace: Duration) -> Duration {
    grace.saturating_sub((grace / 5).min(Duration::from_secs(1)))
}
