//! The connection half of the edge: accepting TCP connections, TLS handshakes under their caps
//! and deadline, the connection slot, keepalive, and the idle and unauthenticated timeouts.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

/// Limits of one TCP listener.
#[derive(Debug, Clone, Copy)]
pub struct TcpLimits {
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub tcp_keepalive: Duration,
    pub max_handshakes: usize,
    pub max_handshakes_per_source: usize,
    pub unauthenticated_idle: Duration,
}

/// A plaintext listener the operator declared for a pod network (`http+pod:`): its callers are
/// the identity `pod`, and a bearer token counts there only when `tokens` (`pod_network_tokens` names this
/// listener).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodNetwork {
    pub tokens: bool,
}

/// How long a newcomer waits for the slot an evicted unauthenticated connection gives back.
const EVICTION_WAIT: Duration = Duration::from_secs(2);

/// Requests in flight on one connection and when the last one ended, for the idle timeout;
/// whether it has been authenticated, and the means to close it when it has not.
#[derive(Debug)]
struct ConnState {
    in_flight: AtomicUsize,
    last_active: Mutex<Instant>,
    opened: Instant,
    /// Set by the first call the edge admitted with a credential.
    authenticated: AtomicBool,
    /// Set when a newcomer needs this (unauthenticated) connection's slot.
    evicted: AtomicBool,
    /// Wakes the connection's pending read, so an eviction takes effect at once.
    reader: Mutex<Option<std::task::Waker>>,
}

impl ConnState {
    fn new() -> ConnState {
        let now = Instant::now();
        ConnState {
            in_flight: AtomicUsize::new(0),
            last_active: Mutex::new(now),
            opened: now,
            authenticated: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            reader: Mutex::new(None),
        }
    }

    fn authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Acquire)
    }

    /// Closes the connection if it is still unauthenticated; whether it was.
    fn evict(&self) -> bool {
        if self.authenticated() || self.evicted.swap(true, Ordering::AcqRel) {
            return false;
        }
        if let Some(waker) = self.reader.lock().unwrap_or_else(PoisonError::into_inner).take() {
            waker.wake();
        }
        true
    }

    fn touch(&self) {
        *self.last_active.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    fn idle_since(&self) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(*self.last_active.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Marks one request (its whole response body included) in flight on its connection.
#[derive(Debug)]
pub(super) struct InFlight(Arc<ConnState>);

impl InFlight {
    fn begin(state: &Arc<ConnState>) -> InFlight {
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        state.touch();
        InFlight(state.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a TCP connection tells each of its requests (a request extension).
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub remote: Option<SocketAddr>,
    pub tls: bool,
    /// Set on an `http+pod:` listener's connections.
    pub pod: Option<PodNetwork>,
    /// Names of the client certificate the handshake verified (empty without one).
    pub cert_names: Arc<Vec<String>>,
    /// On a Unix socket: the peer's uid, as the kernel gave it (`None` inside when it could not).
    pub unix: Option<Option<u32>>,
    state: Arc<ConnState>,
}

impl PeerInfo {
    /// A call begins on this connection, in flight until its guard drops. Any call but an open
    /// one (health) was admitted with a credential (or on a loopback plaintext listener, where
    /// the listener itself is the credential): the connection is no longer a stranger's.
    pub(super) fn begin_call(&self, open: bool) -> InFlight {
        // On a Unix socket the kernel named the peer: any call, health included, is a client's.
        if !open || self.unix.is_some() {
            self.state.authenticated.store(true, Ordering::Release);
        }
        InFlight::begin(&self.state)
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    Unix(UnixStream),
}

/// An accepted TCP connection (TLS already negotiated when the listener has TLS), or a Unix
/// socket connection.
pub struct Conn {
    stream: Stream,
    info: PeerInfo,
    idle_timeout: Duration,
    unauthenticated_idle: Duration,
    idle_timer: Pin<Box<tokio::time::Sleep>>,
    /// Held for the connection's life: the listener's connection cap (and on a Unix socket, its
    /// uid's).
    _slot: (tokio::sync::OwnedSemaphorePermit, Option<tokio::sync::OwnedSemaphorePermit>),
    /// Counts it in `fsd_open_connections` while it lives.
    _open: crate::metrics::Open,
}

impl Connected for Conn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl Conn {
    /// Fails the connection once it has carried no request for the idle timeout. Keepalive pings
    /// do not count: an open connection that asks nothing is closed and may simply reconnect.
    ///
    /// A connection without an authenticated call is closed after the (shorter)
    /// `unauthenticated_idle`, or at once when evicted for a newcomer.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Result<(), io::Error> {
        let state = self.info.state.clone();
        if !state.authenticated() {
            if state.evicted.load(Ordering::Acquire) {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "evicted: no authenticated call"));
            }
            *state.reader.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
        }
        while self.idle_timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            let mut next = match state.idle_since() {
                Some(since) if now.duration_since(since) >= self.idle_timeout => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "connection idle"));
                }
                Some(since) => since + self.idle_timeout,
                None => now + self.idle_timeout,
            };
            if !state.authenticated() {
                let deadline = state.opened + self.unauthenticated_idle;
                if now >= deadline {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "no authenticated call"));
                }
                next = next.min(deadline);
            }
            self.idle_timer.as_mut().reset(next.into());
        }
        Ok(())
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // hyper keeps a read pending on every HTTP/2 connection, so the idle timer is polled
        // (and its waker registered) here.
        if let Err(e) = self.poll_idle(cx) {
            tracing::debug!(remote = ?self.info.remote, "closing idle connection");
            return Poll::Ready(Err(e));
        }
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, data),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, data),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, data),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Stream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// TCP keepalive, so a peer that vanished without a FIN is noticed even between HTTP/2 pings.
fn set_keepalive(stream: &TcpStream, idle: Duration) -> io::Result<()> {
    let keepalive =
        socket2::TcpKeepalive::new().with_time(idle).with_interval(Duration::from_secs(10)).with_retries(3);
    socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive)
}

/// Handshakes in progress per source address.
#[derive(Debug, Default)]
struct Sources(Mutex<HashMap<IpAddr, usize>>);

/// One handshake's place in the per-source count.
struct SourceSlot {
    sources: Arc<Sources>,
    ip: IpAddr,
}

impl Sources {
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<SourceSlot> {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = map.entry(ip).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(SourceSlot { sources: self.clone(), ip })
    }
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut map = self.sources.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = map.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// The listener's connections that have not authenticated yet, oldest first, each with the uid
/// of its Unix peer (`None` on TCP): the ones a newcomer may take a slot from when the listener
/// (or, on a Unix socket, its uid's share) is full.
#[derive(Debug, Default)]
struct Unauthenticated(Mutex<VecDeque<(Option<u32>, Weak<ConnState>)>>);

impl Unauthenticated {
    fn push(&self, uid: Option<u32>, state: &Arc<ConnState>) {
        let mut list = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Keeps the list as short as the connections that can still be evicted.
        list.retain(|(_, w)| w.upgrade().is_some_and(|s| !s.authenticated()));
        list.push_back((uid, Arc::downgrade(state)));
    }

    /// Evicts the oldest connection still unauthenticated (of `uid`, when given); whether there
    /// was one.
    fn evict_oldest(&self, uid: Option<Option<u32>>) -> bool {
        let mut list = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut at = 0;
        while at < list.len() {
            if uid.is_some_and(|uid| list[at].0 != uid) {
                at += 1;
                continue;
            }
            let Some((_, weak)) = list.remove(at) else { break };
            if weak.upgrade().is_some_and(|s| s.evict()) {
                return true;
            }
        }
        false
    }
}

/// A slot of `slots`, or, when they are all taken, the slot of the oldest unauthenticated
/// connection `evict` closes (waited for a little); `None` when there is none to close.
async fn slot_or_evict(
    slots: &Arc<Semaphore>,
    evict: impl FnOnce() -> bool,
) -> Option<tokio::sync::OwnedSemaphorePermit> {
    match slots.clone().try_acquire_owned() {
        Ok(slot) => Some(slot),
        Err(_) if evict() => {
            tokio::time::timeout(EVICTION_WAIT, slots.clone().acquire_owned()).await.ok()?.ok()
        }
        Err(_) => None,
    }
}

/// Accepts connections on `listener` until `stop`, negotiating TLS when `tls` is set, and yields
/// them to the server. A handshake runs in its own task under a deadline, capped overall and per
/// source address, so half-open or slow peers never hold up the accept loop or take connection
/// slots; a connection takes its slot only once its handshake is done. When the listener is
/// full, a newcomer takes the slot of the oldest connection that never authenticated.
pub fn incoming(
    listener: TcpListener,
    tls: Option<crate::tls::Acceptor>,
    limits: TcpLimits,
    stop: watch::Receiver<bool>,
) -> ReceiverStream<Result<Conn, io::Error>> {
    accept(listener, tls, None, limits, stop)
}

/// [`incoming`] for an `http+pod:` listener: plaintext, its connections marked as the pod
/// network's so the edge admits their requests as `pod`.
pub fn incoming_pod(
    listener: TcpListener,
    pod: PodNetwork,
    limits: TcpLimits,
    stop: watch::Receiver<bool>,
) -> ReceiverStream<Result<Conn, io::Error>> {
    accept(listener, None, Some(pod), limits, stop)
}

fn accept(
    listener: TcpListener,
    tls: Option<crate::tls::Acceptor>,
    pod: Option<PodNetwork>,
    limits: TcpLimits,
    mut stop: watch::Receiver<bool>,
) -> ReceiverStream<Result<Conn, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let handshakes = Arc::new(Semaphore::new(limits.max_handshakes));
    let sources = Arc::new(Sources::default());
    let unauthenticated = Arc::new(Unauthenticated::default());
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|s| *s) => return,
            };
            let (stream, remote) = match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Only a TLS listener has handshakes to cap; a plaintext one hands over at once.
            let (handshake, source) = if tls.is_some() {
                let Ok(handshake) = handshakes.clone().try_acquire_owned() else {
                    tracing::warn!(%remote, max = limits.max_handshakes, "handshake cap reached; closing the new connection");
                    continue;
                };
                let Some(source) = sources.take(remote.ip(), limits.max_handshakes_per_source) else {
                    tracing::info!(%remote, max = limits.max_handshakes_per_source, "too many handshakes from this address; closing the new connection");
                    continue;
                };
                (Some(handshake), Some(source))
            } else {
                (None, None)
            };
            let _ = stream.set_nodelay(true);
            if let Err(e) = set_keepalive(&stream, limits.tcp_keepalive) {
                tracing::debug!(error = %e, "cannot set TCP keepalive");
            }
            let (tx, tls, slots, unauthenticated) =
                (tx.clone(), tls.clone(), slots.clone(), unauthenticated.clone());
            tokio::spawn(async move {
                let (stream, cert_names) = match tls {
                    None => (Stream::Plain(stream), Vec::new()),
                    Some(acceptor) => {
                        // The configuration in use now: a rotation changes the next handshake.
                        let handshake = acceptor.get().accept(stream);
                        match tokio::time::timeout(limits.handshake_timeout, handshake).await {
                            Ok(Ok(tls)) => {
                                let names = tls
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|chain| chain.first())
                                    .map(crate::tls::cert_names)
                                    .unwrap_or_default();
                                (Stream::Tls(Box::new(tls)), names)
                            }
                            Ok(Err(e)) => {
                                tracing::info!(%remote, error = %e, "TLS handshake refused");
                                return;
                            }
                            Err(_) => {
                                tracing::info!(%remote, "TLS handshake timed out");
                                return;
                            }
                        }
                    }
                };
                drop((handshake, source));
                let Some(slot) = slot_or_evict(&slots, || unauthenticated.evict_oldest(None)).await else {
                    tracing::warn!(%remote, max = limits.max_connections, "connection cap reached; closing the new connection");
                    return;
                };
                let tls = matches!(stream, Stream::Tls(_));
                let state = Arc::new(ConnState::new());
                unauthenticated.push(None, &state);
                let first_timer = limits.idle_timeout.min(limits.unauthenticated_idle);
                let conn = Conn {
                    stream,
                    info: PeerInfo {
                        remote: Some(remote),
                        tls,
                        pod,
                        cert_names: Arc::new(cert_names),
                        unix: None,
                        state,
                    },
                    idle_timeout: limits.idle_timeout,
                    unauthenticated_idle: limits.unauthenticated_idle,
                    idle_timer: Box::pin(tokio::time::sleep(first_timer)),
                    _slot: (slot, None),
                    _open: crate::metrics::Open::connection(),
                };
                let _ = tx.send(Ok(conn)).await;
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Limits of one Unix-socket listener: the TCP listeners' idle timeouts, and its own caps.
#[derive(Debug, Clone, Copy)]
pub struct UnixLimits {
    pub idle_timeout: Duration,
    pub unauthenticated_idle: Duration,
    pub max_connections: usize,
    pub max_connections_per_uid: usize,
}

/// Newcomers of one uid that may wait at once for the slot of a connection they evicted: each
/// holds its descriptor meanwhile, so a uid that connects faster than its evictions complete
/// has the rest closed at once rather than pile up descriptors.
const MAX_WAITING_NEWCOMERS: usize = 16;

/// One peer uid's share of a Unix listener: its connection slots, and its newcomers waiting.
#[derive(Debug)]
struct UidShare {
    slots: Arc<Semaphore>,
    waiting: Arc<Semaphore>,
}

/// The shares of the peer uids of one Unix listener.
#[derive(Debug, Default)]
struct UidSlots(Mutex<HashMap<Option<u32>, UidShare>>);

impl UidSlots {
    fn of(&self, uid: Option<u32>, max: usize) -> (Arc<Semaphore>, Arc<Semaphore>) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Forgets the uids that hold no connection and have none waiting, so the map is as long
        // as the peers present.
        map.retain(|_, share| Arc::strong_count(&share.slots) > 1 || Arc::strong_count(&share.waiting) > 1);
        let share = map.entry(uid).or_insert_with(|| UidShare {
            slots: Arc::new(Semaphore::new(max)),
            waiting: Arc::new(Semaphore::new(MAX_WAITING_NEWCOMERS)),
        });
        (share.slots.clone(), share.waiting.clone())
    }
}

/// Accepts connections on a Unix `listener` until `stop`, under the same rules as TCP: the
/// listener's cap, and a cap per peer uid so one local user cannot take every slot; when either
/// is full, a newcomer takes the slot of the oldest connection that has made no call yet (of
/// its own uid, for the uid's cap), else it is closed. Connections that make no call are closed
/// after `unauthenticated_idle`, and idle ones after `idle_timeout`.
pub fn incoming_unix(
    listener: UnixListener,
    limits: UnixLimits,
    mut stop: watch::Receiver<bool>,
) -> ReceiverStream<Result<Conn, io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let uids = Arc::new(UidSlots::default());
    let unauthenticated = Arc::new(Unauthenticated::default());
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.wait_for(|s| *s) => return,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let uid = stream.peer_cred().ok().map(|c| c.uid());
            let (own, waiting) = uids.of(uid, limits.max_connections_per_uid);
            // Room in both caps: the connection is served at once.
            if let Ok(own) = own.clone().try_acquire_owned()
                && let Ok(slot) = slots.clone().try_acquire_owned()
            {
                let conn = unix_conn(stream, uid, (slot, own), &unauthenticated, limits);
                if tx.send(Ok(conn)).await.is_err() {
                    return;
                }
                continue;
            }
            let Ok(newcomer) = waiting.try_acquire_owned() else {
                tracing::debug!(?uid, "too many new connections of this uid at once; closing one");
                continue;
            };
            let (tx, slots, unauthenticated) = (tx.clone(), slots.clone(), unauthenticated.clone());
            // Waiting for an evicted connection's slot must not hold up the accept loop.
            tokio::spawn(async move {
                let _newcomer = newcomer;
                let Some(own) = slot_or_evict(&own, || unauthenticated.evict_oldest(Some(uid))).await else {
                    tracing::warn!(
                        ?uid,
                        max = limits.max_connections_per_uid,
                        "connection cap of this uid reached; closing the new connection"
                    );
                    return;
                };
                let Some(slot) = slot_or_evict(&slots, || unauthenticated.evict_oldest(None)).await else {
                    tracing::warn!(
                        ?uid,
                        max = limits.max_connections,
                        "connection cap reached; closing the new connection"
                    );
                    return;
                };
                let _ = tx.send(Ok(unix_conn(stream, uid, (slot, own), &unauthenticated, limits))).await;
            });
        }
    });
    ReceiverStream::new(rx)
}

/// A Unix connection that holds its slots, listed as not yet authenticated.
fn unix_conn(
    stream: UnixStream,
    uid: Option<u32>,
    (slot, own): (tokio::sync::OwnedSemaphorePermit, tokio::sync::OwnedSemaphorePermit),
    unauthenticated: &Unauthenticated,
    limits: UnixLimits,
) -> Conn {
    let state = Arc::new(ConnState::new());
    unauthenticated.push(uid, &state);
    let first_timer = limits.idle_timeout.min(limits.unauthenticated_idle);
    Conn {
        stream: Stream::Unix(stream),
        info: PeerInfo {
            remote: None,
            tls: false,
            pod: None,
            cert_names: Arc::default(),
            unix: Some(uid),
            state,
        },
        idle_timeout: limits.idle_timeout,
        unauthenticated_idle: limits.unauthenticated_idle,
        idle_timer: Box::pin(tokio::time::sleep(first_timer)),
        _slot: (slot, Some(own)),
        _open: crate::metrics::Open::connection(),
    }
}
