//! The network process: binds the listeners, opens the audit log, reads the TLS files, then
//! confines itself to no filesystem rights at all before any thread starts; serves gRPC (fsd.v1,
//! grpc.health.v1 and server reflection, behind the identity edge) and routes every call to a
//! worker of the call's mode. Rotated TLS files come from the supervisor.

use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use fsd_proto::v1::fsd_server::FsdServer;
use tokio::sync::watch;

use crate::audit::Audit;
use crate::config::Config;
use crate::daemon::DaemonError;
use crate::dispatch::Dispatcher;
use crate::edge::{Edge, TcpLimits, UnixLimits};
use crate::ipc_messages::{self, Control, ControlRequest, IpcError};
use crate::service::FsdService;
use crate::sys::ipc::AsyncFrames;

/// Threads that read the files of streamed reads, shared by every stream.
const STREAM_READERS: usize = 4;
/// Threads that apply escalated patches to whole files (`dispatch::cpu`), and the checks that
/// may be queued for them. Two: such checks are rare (an escalation is asked of a person or a
/// rule file) and each may take as long as its file is big, so two keep one big check from
/// holding the next while leaving the runtime's threads (one per core) the cores; 64 queued
/// are far more than the pending-escalation budgets let clients have in flight together.
const CHECK_THREADS: usize = 2;
const QUEUED_CHECKS: usize = 64;

mod bind;
use bind::{Bound, Published, bind};

/// `audit_key`: the seed of the audit log's checkpoint key, from the supervisor's start frame.
pub fn run(config: Config, control: UnixStream, audit_key: Option<[u8; 32]>) -> Result<(), DaemonError> {
    // Counted once, before confinement hides the cgroup's CPU limit: the runtime starts this
    // many, and the direct path reads on all of them but one (`dispatch::inline`).
    let runtime_threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let started = match start(&config, &control, audit_key, runtime_threads) {
        Ok(started) => started,
        Err(e) => {
            // The supervisor reports it, once; this process says nothing more.
            if ipc_messages::send(&control, &ControlRequest::StartFailed { reason: e.to_string() }, None)
                .is_ok()
            {
                return Err(DaemonError::Reported);
            }
            return Err(e);
        }
    };
    let Started { listeners, audit, roots, control_reader, direct, collector } = started;
    crate::metrics::set_enabled(config.metrics);
    let sealed = audit.clone();
    let tls = config.tls.clone().zip(listeners.tls.clone());

    let readers = crate::dispatch::stream::Readers::start(STREAM_READERS).map_err(DaemonError::Runtime)?;
    let cpu = crate::dispatch::cpu::Cpu::start(CHECK_THREADS, QUEUED_CHECKS).map_err(DaemonError::Runtime)?;
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(runtime_threads).enable_all().thread_name("fsd-net");
    // A task woken into a worker's LIFO slot cannot be stolen by another worker: behind a read
    // held on that worker's thread (`dispatch::inline`) it would wait as long as the read,
    // and with it the connection it drives. Without the slot every queued task is another
    // worker's to take. (`tokio_unstable` is set in `.cargo/config.toml`; a build without it
    // runs no read on a runtime thread, `dispatch::inline::LIFO_SLOT_OFF`.) A runtime whose
    // threads never read keeps the slot.
    #[cfg(tokio_unstable)]
    if direct.reader().is_some() {
        builder.disable_lifo_slot();
    }
    let runtime = builder.build().map_err(DaemonError::Runtime)?;
    // The stop signals are ours before the supervisor hears `Listening` (and may forward a
    // SIGTERM), and while the workers come up.
    let signals = {
        let _entered = runtime.enter();
        Signals::register()?
    };
    ipc_messages::send(&control, &ControlRequest::Listening, None)?;
    let served = runtime.block_on(async move {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (kill_tx, kill_rx) = tokio::sync::mpsc::unbounded_channel();
        let stopping = kill_tx.clone();
        let dispatcher = Arc::new(Dispatcher::new(
            config.call_timeout,
            (config.max_queued_calls, config.workers_per_mode),
            kill_tx,
            readers,
            cpu,
            direct,
        ));
        let reader = AsyncFrames::new(control_reader).map_err(DaemonError::Runtime)?;
        let writer = AsyncFrames::new(control).map_err(DaemonError::Runtime)?;
        let stop_seen = Arc::new(tokio::sync::Notify::new());
        let per_mode = config.workers_per_mode;
        tokio::spawn(serve_control(
            dispatcher.clone(),
            reader,
            tls,
            stop_tx.clone(),
            stop_seen.clone(),
            per_mode,
        ));
        // Test hook: the request a compromised network process could make.
        #[cfg(feature = "fault-injection")]
        if let Some(pid) = std::env::var("FSD_FAULT_ASK_KILL").ok().and_then(|p| p.parse().ok()) {
            let _ = stopping.send((ipc_messages::ControlRequest::Kill { pid }, None));
        }
        tokio::spawn(send_control(writer, kill_rx));
        if let (Some(settings), Some(collector)) = (&config.traces, collector) {
            crate::traces::start(collector, settings)?;
        }
        // Once, beside the start rather than in its way: an approver may come up later.
        if let Some(endpoint) = config.approver_endpoint.clone() {
            let tls = config.approver_tls.clone();
            tokio::spawn(async move { crate::approver_client::probe(&endpoint, tls.as_ref()).await });
        }
        dispatcher.wait_ready(&config.served_modes(), config.workers_per_mode, Duration::from_secs(10)).await;
        let service = FsdService::new(dispatcher.clone(), &config, roots, audit, listeners.tls.clone());
        serve(config, service, dispatcher, listeners, (signals, stopping, stop_seen), (stop_tx, stop_rx))
            .await
    });
    // Calls still waiting on a stuck worker must not hold the exit: the supervisor kills that
    // worker once this process is gone.
    runtime.shutdown_timeout(Duration::from_millis(100));
    // After the last call's record: the log ends with a signed checkpoint.
    if let Some(audit) = sealed {
        audit.close();
    }
    served
}

/// SIGTERM and SIGINT, registered before the workers are waited for.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn register() -> Result<Signals, DaemonError> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate()).map_err(DaemonError::Signal)?,
            int: signal(SignalKind::interrupt()).map_err(DaemonError::Signal)?,
        })
    }
}

/// What the network process holds once its start-up steps succeeded.
struct Started {
    listeners: Listeners,
    audit: Option<Arc<Audit>>,
    roots: Vec<(String, bool)>,
    control_reader: UnixStream,
    direct: crate::dispatch::direct::Direct,
    /// The OTLP collector: its address resolved and its files read while they still can be.
    collector: Option<crate::traces::Collector>,
}

/// Every step that needs the filesystem or may fail on the configuration, then confinement.
fn start(
    config: &Config,
    control: &UnixStream,
    audit_key: Option<[u8; 32]>,
    runtime_threads: usize,
) -> Result<Started, DaemonError> {
    let bindings =
        config.listen.iter().map(|l| bind(l, config.socket_access)).collect::<Result<Vec<_>, _>>()?;
    // Everything else that may fail comes before the Unix sockets appear at their paths.
    // The checkpoint key came in the start frame: the supervisor read it (or made it), so this
    // process never opens the key file.
    let audit_key = audit_key.map(|seed| ed25519_dalek::SigningKey::from_bytes(&seed));
    let audit = match &config.audit_log {
        Some(path) => Some(Arc::new(
            Audit::open(path, config.audit_checkpoint_every, audit_key)
                .map_err(|source| DaemonError::Audit { path: path.clone(), source })?,
        )),
        None => None,
    };
    let roots = config
        .roots
        .iter()
        .map(|r| {
            let path = std::fs::canonicalize(&r.path).unwrap_or_else(|_| r.path.clone());
            (crate::op::path_string(&path), r.writable)
        })
        .collect::<Vec<_>>();
    let control_reader = control.try_clone().map_err(DaemonError::Runtime)?;
    // The TLS files are read now: after confinement this process cannot open them, and later
    // versions come from the supervisor (`Control::Tls`).
    let tls = match &config.tls {
        Some(tls) => {
            let served = crate::tls::build(tls, &crate::tls::TlsFiles::read(tls)?)?;
            tracing::info!(serial = %served.certificate.serial, not_after = %served.certificate.expires(), "TLS certificate");
            Some(crate::tls::Current::new(served))
        }
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
    let collector = config.traces.as_ref().map(crate::traces::prepare).transpose()?;
    let instance = instance_id()?;
    // What /v1/metadata may serve, chosen by the config alone.
    let metadata = config.rest.metadata(std::env::vars());
    let edge = Edge::new(&instance, config.tokens.clone())
        .map_err(|e| DaemonError::Runtime(std::io::Error::other(e)))?;

    // Every listener is bound: only now do the Unix sockets appear at their paths, right after
    // one another (a client that finds one finds every listener ready), and before confinement
    // takes the right to rename them into place.
    let mut published = Published::default();
    let bound = bindings.into_iter().map(|b| published.publish(b)).collect::<Result<Vec<_>, _>>()?;
    // The direct read threads open the roots and confine themselves, each as a read-only worker
    // would, before this thread confines the rest of the process: as that worker reads while
    // they serve (its runtime threads then read too, `dispatch::inline`), with no filesystem
    // right at all otherwise.
    let direct = crate::dispatch::direct::Direct::start(config, runtime_threads);
    let reader = direct.reader();
    if reader.is_some() {
        // The approver's socket keeps answering to this process's own identity.
        let own = config.clone();
        let confine = move || crate::role_confinement::network(&own, None).map(drop);
        crate::approver_client::start_connector(config.approver_endpoint.as_ref(), confine)
            .map_err(DaemonError::Confine)?;
    }
    let confinement = crate::role_confinement::network(config, reader).map_err(DaemonError::Confine)?;
    published.keep();
    match reader {
        Some(_) => tracing::info!(
            fence = confinement.describe(),
            "network process confined: reading beneath the roots as a read-only worker, nothing else"
        ),
        None => {
            tracing::info!(fence = confinement.describe(), "network process confined: no filesystem rights")
        }
    }
    tracing::info!(instance = %instance, "daemon instance");
    let listeners = Listeners { bound, tls, health: health_listener, edge, metadata };
    Ok(Started { listeners, audit, roots, control_reader, direct, collector })
}

/// Requests to the supervisor, each with the descriptor its frame carries.
pub(crate) type ToSupervisor =
    tokio::sync::mpsc::UnboundedSender<(ControlRequest, Option<std::os::fd::OwnedFd>)>;

/// How long a stopping network process waits for the supervisor to confirm it heard so.
const STOP_SEEN_WAIT: Duration = Duration::from_secs(1);

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
    /// Every TLS listener's configuration, swapped when the files are rotated.
    tls: Option<crate::tls::Current>,
    health: Option<std::net::TcpListener>,
    edge: Edge,
    metadata: std::collections::BTreeMap<String, String>,
}

/// Registers the workers the supervisor starts, and takes the TLS files it hands over, until
/// the supervisor goes away.
async fn serve_control(
    dispatcher: Arc<Dispatcher>,
    mut control: AsyncFrames,
    tls: Option<(crate::tls::TlsConfig, crate::tls::Current)>,
    stop: watch::Sender<bool>,
    stop_seen: Arc<tokio::sync::Notify>,
    workers_per_mode: usize,
) {
    // Workers announced per mode: past the pool's size, each one replaces a worker that died.
    let mut announced: std::collections::HashMap<crate::op::Mode, usize> = Default::default();
    loop {
        match ipc_messages::recv_async::<Control>(&mut control).await {
            Ok((Control::Worker { mode, pid }, Some(fd))) => {
                let seen = announced.entry(mode).or_default();
                *seen += 1;
                let start = if *seen > workers_per_mode {
                    crate::metrics::WorkerStart::Replacement
                } else {
                    crate::metrics::WorkerStart::Initial
                };
                crate::metrics::worker_started(mode, start);
                let dispatcher = dispatcher.clone();
                let socket = UnixStream::from(fd);
                // Waiting for the worker's ready message must not hold up the next one.
                tokio::spawn(async move { dispatcher.add_worker(mode, pid, socket).await });
            }
            Ok((Control::Worker { pid, .. }, None)) => {
                tracing::error!(pid, "worker announced without its socket")
            }
            Ok((Control::Unavailable { mode, reason }, _)) => {
                tracing::error!(mode = mode.as_str(), %reason, "mode unavailable");
                dispatcher.mark_unavailable(mode, reason);
            }
            Ok((Control::Abandoned { mode }, _)) => crate::metrics::worker_abandoned(mode),
            Ok((Control::Stuck { mode, abandoned }, _)) => {
                tracing::error!(mode = mode.as_str(), abandoned, "mode stopped: its workers are stuck");
                dispatcher.mark_stuck(mode, abandoned);
            }
            Ok((Control::Available { mode }, _)) => {
                tracing::info!(mode = mode.as_str(), "mode available again");
                dispatcher.mark_available(mode);
            }
            // A permit: it may come before this process asks (the supervisor stops the daemon).
            Ok((Control::StopSeen, _)) => stop_seen.notify_one(),
            Ok((Control::Recovered { pid }, _)) => dispatcher.recovered(pid),
            Ok((Control::Tls(files), _)) => match &tls {
                // The supervisor checked these files; they build here the same way.
                Some((config, current)) => match crate::tls::build(config, &files) {
                    Ok(served) => {
                        let certificate = served.certificate.clone();
                        current.replace(served);
                        tracing::info!(serial = %certificate.serial, not_after = %certificate.expires(), "TLS certificate rotated: new handshakes use it");
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "rotated TLS files refused; keeping the certificate in use")
                    }
                },
                None => tracing::error!("TLS files handed over, but no listener uses TLS"),
            },
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

/// Sends the dispatcher's requests (kill a hung worker) to the supervisor.
async fn send_control(
    control: AsyncFrames,
    mut requests: tokio::sync::mpsc::UnboundedReceiver<(
        ipc_messages::ControlRequest,
        Option<std::os::fd::OwnedFd>,
    )>,
) {
    while let Some((request, fd)) = requests.recv().await {
        if let Err(e) =
            ipc_messages::send_async(&control, &request, fd.as_ref().map(std::os::fd::AsFd::as_fd)).await
        {
            tracing::error!(error = %e, "cannot reach the supervisor");
            return;
        }
    }
}

/// The health service name of one mode: `fsd.v1.Fsd/<mode>`.
pub fn mode_health_name(mode: crate::op::Mode) -> String {
    format!("{}/{}", <FsdServer<FsdService> as tonic::server::NamedService>::NAME, mode.as_str())
}

/// The health service name of the direct read path: `fsd.v1.Fsd/direct-reads`.
pub fn direct_reads_health_name() -> String {
    format!("{}/direct-reads", <FsdServer<FsdService> as tonic::server::NamedService>::NAME)
}

/// Health statuses from the modes' states: each mode's own name, and the overall ("") and
/// `fsd.v1.Fsd` names, SERVING only while every served mode is; and the direct read path's own
/// name, which does not count for the overall one (reads go to the workers while it is off).
fn health_statuses(modes: &[(crate::op::Mode, bool)], direct: bool) -> Vec<(String, bool)> {
    let all = modes.iter().all(|(_, serving)| *serving);
    let fsd = <FsdServer<FsdService> as tonic::server::NamedService>::NAME;
    let mut out = vec![(String::new(), all), (fsd.to_owned(), all)];
    out.extend(modes.iter().map(|(mode, serving)| (mode_health_name(*mode), *serving)));
    out.push((direct_reads_health_name(), direct));
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

/// Keeps grpc.health.v1 true: `fsd.v1.Fsd/<mode>` NOT_SERVING while the mode is unavailable
/// (given up, or too many hung workers abandoned), and `""` and `fsd.v1.Fsd` NOT_SERVING while
/// any served mode is.
async fn report_modes(
    dispatcher: Arc<Dispatcher>,
    modes: Vec<crate::op::Mode>,
    reporter: tonic_health::server::HealthReporter,
) {
    loop {
        let changed = dispatcher.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let states: Vec<_> = dispatcher
            .report()
            .into_iter()
            .filter(|r| modes.contains(&r.mode))
            .map(|r| (r.mode, r.unavailable.is_none()))
            .collect();
        let direct = dispatcher.direct().off_reason().is_none();
        report_health(&reporter, health_statuses(&states, direct)).await;
        changed.await;
    }
}

async fn serve(
    config: Config,
    service: FsdService,
    dispatcher: Arc<Dispatcher>,
    listeners: Listeners,
    (mut signals, supervisor, stop_seen): (Signals, ToSupervisor, Arc<tokio::sync::Notify>),
    (stop_tx, stop_rx): (watch::Sender<bool>, watch::Receiver<bool>),
) -> Result<(), DaemonError> {
    let Listeners { bound, tls, health, edge, metadata } = listeners;
    // Standard health: "" and "fsd.v1.Fsd" for the daemon, "fsd.v1.Fsd/<mode>" per mode.
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let served_modes = config.served_modes();
    let modes_task = tokio::spawn(report_modes(dispatcher, served_modes.clone(), reporter.clone()));
    let reflection_v1 = reflection().build_v1().map_err(|e| DaemonError::Reflection(e.to_string()))?;
    let reflection_v1alpha =
        reflection().build_v1alpha().map_err(|e| DaemonError::Reflection(e.to_string()))?;
    let transport = config.transport;
    let (tcp_limits, unix_limits) = connection_limits(&transport);
    let mut servers = tokio::task::JoinSet::new();
    // The HTTP listeners also carry fsd.v1, health and reflection: gRPC-Web (HTTP/1.1, through
    // reverse proxies) translated to gRPC, behind the same edge as the gRPC listeners.
    let grpc = {
        let max = config.max_message_bytes as usize;
        let svc =
            FsdServer::new(service.clone()).max_decoding_message_size(max).max_encoding_message_size(max);
        let routes = tonic::service::Routes::new(svc)
            .add_service(health_service.clone())
            .add_service(reflection_v1.clone())
            .add_service(reflection_v1alpha.clone())
            .prepare();
        let stack = tower::ServiceBuilder::new()
            .layer(tonic_web::GrpcWebLayer::new())
            .layer(edge.clone())
            .service(routes);
        tower::util::BoxCloneSyncService::new(stack)
    };
    let face = std::sync::Arc::new(crate::rest::Face {
        service: service.clone(),
        edge: edge.clone(),
        root: crate::op::path_string(&config.rest.root),
        max_upload: config.limits.max_upload_bytes,
        chunk: config.limits.default_chunk_bytes,
        modes: config.served_modes(),
        started: std::time::Instant::now(),
        metadata,
        stopping: stop_rx.clone(),
        grpc: Some(grpc),
        allowed: config.rest.allowed.clone(),
    });
    let rest =
        RestListeners { config: &config, face: &face, tls: &tls, tcp_limits, unix_limits, stop_rx: &stop_rx };
    for listener in bound {
        let router = grpc_router(
            &config,
            &service,
            &edge,
            health_service.clone(),
            reflection_v1.clone(),
            reflection_v1alpha.clone(),
        );
        let mut stop = stop_rx.clone();
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        match listener {
            Bound::HttpUnix(std_listener, name) => rest.unix(std_listener, name, &mut servers)?,
            Bound::Http(std_listener, name, plain) => rest.tcp(std_listener, name, plain, &mut servers)?,
            Bound::HttpPod(std_listener, name, configured) => {
                rest.pod(std_listener, (name, configured), &mut servers)?
            }
            Bound::Unix(std_listener, name) => {
                let listener = tokio::net::UnixListener::from_std(std_listener)
                    .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
                tracing::info!(listen = %name, "listening");
                let incoming = crate::edge::incoming_unix(listener, unix_limits, stop_rx.clone());
                servers.spawn(async move {
                    let result = router.serve_with_incoming_shutdown(incoming, shutdown).await;
                    result.map_err(|source| DaemonError::Serve { listen: name, source })
                });
            }
            Bound::Tcp(std_listener, name) => {
                let listener = tokio::net::TcpListener::from_std(std_listener)
                    .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
                if tls.is_some() {
                    tracing::info!(listen = %name, tls = true, "listening");
                } else {
                    warn_plaintext(&config, &name, "listening on plaintext loopback TCP");
                }
                let tls = tls.as_ref().map(|t| t.acceptor(false));
                let incoming = crate::edge::incoming(listener, tls, tcp_limits, stop_rx.clone());
                servers.spawn(async move {
                    let result = router.serve_with_incoming_shutdown(incoming, shutdown).await;
                    result.map_err(|source| DaemonError::Serve { listen: name, source })
                });
            }
        }
    }
    if let Some(std_listener) = health {
        spawn_health_listener(std_listener, health_service.clone(), tcp_limits, &stop_rx, &mut servers)?;
    }
    let failure = first_stop(&mut signals, &stop_rx, &mut servers).await;
    let stop_began = tokio::time::Instant::now();
    // Whatever stops this process (a signal sent to it rather than to the supervisor, a server
    // that failed), the supervisor hears it before the workers' sockets close, so it does not
    // replace the workers that exit next.
    let _ = supervisor.send((ControlRequest::Stopping, None));
    // Until it says it heard (bounded: a supervisor that is gone never will).
    let _ = tokio::time::timeout(STOP_SEEN_WAIT, stop_seen.notified()).await;
    modes_task.abort();
    let stopping: Vec<_> = served_modes.iter().map(|m| (*m, false)).collect();
    report_health(&reporter, health_statuses(&stopping, false)).await;
    let _ = stop_tx.send(true);
    let served = drain(servers, failure, config.shutdown_grace).await;
    // The drained calls' spans, within what is left of this process's share of the grace.
    let left = (stop_began + drain_budget(config.shutdown_grace))
        .saturating_duration_since(tokio::time::Instant::now());
    crate::traces::flush(left.min(crate::traces::FLUSH_WAIT)).await;
    served
}

/// Reflection answers from the descriptor sets the services were compiled from, and lists
/// only the services a listener serves (the descriptor set also holds fsd.approver.v1).
fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(fsd_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name(<FsdServer<FsdService> as tonic::server::NamedService>::NAME)
        .with_service_name("grpc.health.v1.Health")
        .with_service_name("grpc.reflection.v1.ServerReflection")
        .with_service_name("grpc.reflection.v1alpha.ServerReflection")
}

/// The limits of the TCP and the Unix-socket listeners' connections.
fn connection_limits(transport: &crate::config::Transport) -> (TcpLimits, UnixLimits) {
    let tcp_limits = TcpLimits {
        handshake_timeout: transport.handshake_timeout,
        idle_timeout: transport.idle_timeout,
        max_connections: transport.max_connections,
        tcp_keepalive: transport.keepalive_interval,
        max_handshakes: transport.max_handshakes,
        max_handshakes_per_source: transport.max_handshakes_per_source,
        unauthenticated_idle: transport.unauthenticated_idle,
    };
    let unix_limits = UnixLimits {
        idle_timeout: transport.idle_timeout,
        unauthenticated_idle: transport.unauthenticated_idle,
        max_connections: transport.max_unix_connections,
        max_connections_per_uid: transport.max_unix_connections_per_uid,
    };
    (tcp_limits, unix_limits)
}

type Servers = tokio::task::JoinSet<Result<(), DaemonError>>;

/// The gRPC server of a `unix:` or `tcp:` listener: fsd.v1, health and reflection, behind the
/// identity edge.
fn grpc_router(
    config: &Config,
    service: &FsdService,
    edge: &Edge,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    reflection_v1: tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    reflection_v1alpha: tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
) -> tonic::transport::server::Router<tower::layer::util::Stack<Edge, tower::layer::util::Identity>> {
    let transport = config.transport;
    let max = config.max_message_bytes as usize;
    let svc = FsdServer::new(service.clone()).max_decoding_message_size(max).max_encoding_message_size(max);
    // Request compression is never accepted (no `accept_compressed`, no codec compiled in):
    // a compressed request is refused before it is inflated.
    tonic::transport::Server::builder()
        // Receive windows: what a client may send before the daemon reads it, so what one
        // connection can make the network process hold (tonic's 64 KiB defaults cost uploads
        // several times over here). 2 MiB a stream and 4 MiB a connection keep a 1 GiB
        // upload at full speed on a local socket; 16/32 MiB took the daemon's peak from 46
        // to 84 MiB after five of them (BENCHMARKS.md). Downloads run on the client's
        // windows (`fsd_tool_client::connect`).
        .initial_stream_window_size(2 << 20)
        .initial_connection_window_size(4 << 20)
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
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
}

/// What the REST (and gRPC-Web) listeners are served with.
struct RestListeners<'a> {
    config: &'a Config,
    face: &'a Arc<crate::rest::Face>,
    tls: &'a Option<crate::tls::Current>,
    tcp_limits: TcpLimits,
    unix_limits: UnixLimits,
    stop_rx: &'a watch::Receiver<bool>,
}

impl RestListeners<'_> {
    fn unix(
        &self,
        std_listener: std::os::unix::net::UnixListener,
        name: String,
        servers: &mut Servers,
    ) -> Result<(), DaemonError> {
        let listener = tokio::net::UnixListener::from_std(std_listener)
            .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
        tracing::info!(listen = %name, "listening (REST, gRPC-Web)");
        let incoming = crate::edge::incoming_unix(listener, self.unix_limits, self.stop_rx.clone());
        let (face, stop) = (self.face.clone(), self.stop_rx.clone());
        servers.spawn(async move {
            crate::rest::serve(incoming, crate::rest::host::Reach::Unix, face, stop).await;
            Ok(())
        });
        Ok(())
    }

    fn tcp(
        &self,
        std_listener: std::net::TcpListener,
        name: String,
        plain: bool,
        servers: &mut Servers,
    ) -> Result<(), DaemonError> {
        let listener = tokio::net::TcpListener::from_std(std_listener)
            .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
        let tls = if plain { None } else { self.tls.as_ref().map(|t| t.acceptor(true)) };
        if tls.is_some() {
            tracing::info!(listen = %name, tls = true, "listening (REST, gRPC-Web)");
        } else {
            warn_plaintext(self.config, &name, "listening (REST, gRPC-Web) on plaintext loopback TCP");
        }
        let local =
            listener.local_addr().map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
        let reach = crate::rest::host::Reach::tcp(local, tls.is_some());
        let incoming = crate::edge::incoming(listener, tls, self.tcp_limits, self.stop_rx.clone());
        let (face, stop) = (self.face.clone(), self.stop_rx.clone());
        servers.spawn(async move {
            crate::rest::serve(incoming, reach, face, stop).await;
            Ok(())
        });
        Ok(())
    }

    fn pod(
        &self,
        std_listener: std::net::TcpListener,
        (name, configured): (String, std::net::SocketAddr),
        servers: &mut Servers,
    ) -> Result<(), DaemonError> {
        let listener = tokio::net::TcpListener::from_std(std_listener)
            .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
        // The operator opts in per listener: another pod listener's opt-in never reaches this one.
        let pod = crate::edge::PodNetwork { tokens: self.config.pod_network_tokens.contains(&configured) };
        warn_pod_network(self.config, &name, pod.tokens);
        let incoming = crate::edge::incoming_pod(listener, pod, self.tcp_limits, self.stop_rx.clone());
        let (face, stop) = (self.face.clone(), self.stop_rx.clone());
        // A pod is reached by its IP (the router, the SDK's in-cluster mode) or a service
        // name the operator lists: the names a pod-network listener answers to.
        let reach = crate::rest::host::Reach::NetworkPlain;
        servers.spawn(async move {
            crate::rest::serve(incoming, reach, face, stop).await;
            Ok(())
        });
        Ok(())
    }
}

/// The plaintext health listener: health and the metrics only: no fsd.v1, no reflection,
/// nothing that needs a credential.
fn spawn_health_listener(
    std_listener: std::net::TcpListener,
    health_service: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    tcp_limits: TcpLimits,
    stop_rx: &watch::Receiver<bool>,
    servers: &mut Servers,
) -> Result<(), DaemonError> {
    let name =
        std_listener.local_addr().map(|a| format!("health tcp:{a}")).unwrap_or_else(|_| "health".into());
    let listener = tokio::net::TcpListener::from_std(std_listener)
        .map_err(|source| DaemonError::Bind { listen: name.clone(), source })?;
    tracing::info!(listen = %name, "listening (grpc.health.v1 and /metrics only, plaintext)");
    // Health and the metrics only: no fsd.v1, no reflection, nothing that needs a credential.
    // HTTP/1.1 too, for Prometheus scrapers.
    let router = tonic::transport::Server::builder()
        .accept_http1(true)
        .layer(crate::metrics::Endpoint)
        .max_concurrent_streams(16)
        .concurrency_limit_per_connection(4)
        .http2_max_header_list_size(8 << 10)
        .add_service(health_service);
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
    Ok(())
}

/// Waits for what stops this process: a signal, the stop flag, or a server that ended (whose
/// error, if any, is returned).
async fn first_stop(
    signals: &mut Signals,
    stop_rx: &watch::Receiver<bool>,
    servers: &mut Servers,
) -> Option<DaemonError> {
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
    failure
}

/// Waits for the servers to finish, bounded; the first failure is the process's.
async fn drain(
    mut servers: tokio::task::JoinSet<Result<(), DaemonError>>,
    mut failure: Option<DaemonError>,
    shutdown_grace: Duration,
) -> Result<(), DaemonError> {
    // In-flight calls get most of the grace (the supervisor needs the rest to stop the
    // workers); a client that keeps an idle connection open does not hold the daemon up past it.
    let drain = async {
        while let Some(done) = servers.join_next().await {
            if let Ok(Err(e)) = done {
                failure.get_or_insert(e);
            }
        }
    };
    if tokio::time::timeout(drain_budget(shutdown_grace), drain).await.is_err() {
        tracing::warn!("connections still open after the grace period; closing them");
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Any local user (and any container sharing this network namespace) can connect to a
/// plaintext loopback listener, `tcp:` or `http:` alike: its clients are one identity, `tcp`,
/// capped at this mode. Said once per listener, as a warning.
fn warn_plaintext(config: &Config, name: &str, what: &str) {
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
        "{what}: every local user may connect (client_max_modes key \"tcp\")"
    );
}

/// An `http+pod:` listener serves in plaintext beyond loopback, on purpose: said loudly at every
/// start, with what its callers may do, so an operator who did not mean it sees it in the log.
fn warn_pod_network(config: &Config, name: &str, tokens: bool) {
    let max = config
        .client_max_modes
        .get(&crate::identity::ClientKey::Pod)
        .copied()
        .unwrap_or(crate::identity::POD_DEFAULT_MAX);
    tracing::warn!(
        listen = %name,
        tls = false,
        identity = "pod",
        max_mode = max.as_str(),
        tokens,
        "PLAINTEXT listener on the pod network (REST, gRPC-Web): whoever reaches this address is the client \"pod\" (client_max_modes key \"pod\"), bearer tokens {}; only a NetworkPolicy admitting the sandbox-router keeps anyone else off it",
        if tokens { "cross the network in clear text (pod_network_tokens names this listener)" } else { "are refused here (pod_network_tokens does not name this listener)" }
    );
}

/// The network process's share of `shutdown_grace`: all but a fifth (at most a second), which
/// the supervisor keeps for stopping the workers.
fn drain_budget(grace: Duration) -> Duration {
    grace.saturating_sub((grace / 5).min(Duration::from_secs(1)))
}
