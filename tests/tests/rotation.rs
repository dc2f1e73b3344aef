//! TLS rotation without a restart: the supervisor sees the files change (rewritten, renamed, or
//! swapped Kubernetes-style through the `..data` symlink), and new handshakes present the new
//! certificate and trust the new client CAs while connections made before go on; files that do
//! not load keep the certificate in use and are said in one log line each.

use crate::common;
use crate::pki;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fsd_tool_client::connect::{self, Credentials, Endpoint, TlsCredentials};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls;

const NAME: &str = "fsd.test";
const FIRST: u64 = 0x1100_0000_0000_0001;
const SECOND: u64 = 0x1100_0000_0000_0002;

/// Where the daemon's TLS files are, and how an operator's tooling replaces them.
#[derive(Debug, Clone, Copy)]
enum Layout {
    /// `tls.crt` and `tls.key` renamed into place one after the other (cert-manager's csi
    /// driver, a script with `mv`).
    Files,
    /// A mounted Kubernetes secret: `tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>`;
    /// the kubelet writes a new timestamped directory and renames a new `..data` link over the
    /// old one, then removes the old directory.
    Kubernetes,
}

/// The daemon's TLS files in `live/`, replaced the way `layout`'s tooling does.
struct Files {
    layout: Layout,
    live: PathBuf,
    /// The Kubernetes generation directories written so far.
    generation: u32,
}

impl Files {
    /// Puts this certificate and key in place.
    fn install(&mut self, cert: &Path, key: &Path) {
        let live = &self.live;
        match self.layout {
            Layout::Files => {
                for (from, name) in [(key, "tls.key"), (cert, "tls.crt")] {
                    let tmp = live.join(format!(".{name}.tmp"));
                    std::fs::copy(from, &tmp).unwrap();
                    std::fs::rename(&tmp, live.join(name)).unwrap();
                }
            }
            Layout::Kubernetes => {
                self.generation += 1;
                let generation =
                    format!("..2026_12_03_10_00_{:02}.{}", self.generation, 1000 + self.generation);
                std::fs::create_dir(live.join(&generation)).unwrap();
                std::fs::copy(cert, live.join(&generation).join("tls.crt")).unwrap();
                std::fs::copy(key, live.join(&generation).join("tls.key")).unwrap();
                let old = std::fs::read_link(live.join("..data")).ok();
                std::os::unix::fs::symlink(&generation, live.join("..data_tmp")).unwrap();
                std::fs::rename(live.join("..data_tmp"), live.join("..data")).unwrap();
                if let Some(old) = old {
                    std::fs::remove_dir_all(live.join(old)).unwrap();
                }
                for name in ["tls.crt", "tls.key"] {
                    if std::fs::symlink_metadata(live.join(name)).is_err() {
                        std::os::unix::fs::symlink(format!("..data/{name}"), live.join(name)).unwrap();
                    }
                }
            }
        }
    }
}

/// A daemon serving TLS on loopback from files in `live/`, and the CAs of its test PKI.
struct Fixture {
    dir: tempfile::TempDir,
    files: Files,
    /// Signs the server certificates.
    server_ca: pki::Ca,
    /// A client of the client CA the daemon trusts at start.
    client: pki::Pair,
    _daemon: fsd_testkit::Daemon,
    port: u16,
    log: PathBuf,
}

impl Fixture {
    fn start(layout: Layout) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let server_ca = pki::Ca::new(d, "server-ca");
        let client_ca = pki::Ca::new(d, "client-ca");
        let client = client_ca.client("agent", "agent");
        let first = server_ca.server_serial("first", &[NAME], FIRST);
        let live = d.join("live");
        std::fs::create_dir(&live).unwrap();
        std::fs::copy(&client_ca.cert, live.join("clients.pem")).unwrap();
        let mut files = Files { layout, live: live.clone(), generation: 0 };
        files.install(&first.cert, &first.key);
        let root = d.join("ws");
        std::fs::create_dir(&root).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = d.join("fsd.log");
        let config = format!(
            "tls_cert = {:?}\ntls_key = {:?}\ntls_client_ca = {:?}\n",
            live.join("tls.crt"),
            live.join("tls.key"),
            live.join("clients.pem")
        );
        let daemon = common::launch()
            .unix(d.join("fsd.sock"))
            .writable_root(std::fs::canonicalize(&root).unwrap())
            .args(["--listen".to_owned(), format!("tcp:127.0.0.1:{port}")])
            .config(d.join("fsd.toml"), config)
            .stderr(fsd_testkit::Stderr::Log(log.clone()))
            // The rotations themselves are said at info.
            .env("FSD_LOG", "info")
            .start()
            .unwrap_or_else(|e| panic!("{e}"));
        Fixture { dir, files, server_ca, client, _daemon: daemon, port, log }
    }

    /// Replaces one file by rename (one step: nothing half-done in between).
    fn replace(&self, name: &str, bytes: &[u8]) {
        let live = &self.files.live;
        let tmp = live.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, live.join(name)).unwrap();
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint::Tcp(format!("127.0.0.1:{}", self.port))
    }

    fn credentials(&self, client: &pki::Pair) -> Credentials {
        Credentials {
            tls: Some(TlsCredentials {
                ca_pem: std::fs::read(&self.server_ca.cert).unwrap(),
                identity: Some((std::fs::read(&client.cert).unwrap(), std::fs::read(&client.key).unwrap())),
                server_name: Some(NAME.into()),
            }),
            token: None,
            headers: Vec::new(),
        }
    }

    /// The certificate a new handshake is shown (DER of the leaf).
    async fn presented(&self) -> Vec<u8> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_file(&self.server_ca.cert).unwrap()).unwrap();
        let chain = vec![CertificateDer::from_pem_file(&self.client.cert).unwrap()];
        let key = PrivateKeyDer::from_pem_file(&self.client.key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec()];
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from(NAME).unwrap(), tcp)
            .await
            .unwrap();
        tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
    }

    /// What `fsd-tools doctor` says of the certificate, asked over the daemon's Unix socket.
    fn doctor_line(&self) -> String {
        let out = std::process::Command::new(common::tools_bin())
            .args(["doctor", &format!("unix:{}", self.dir.path().join("fsd.sock").display())])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "doctor: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        stdout.lines().find(|l| l.contains("TLS certificate")).unwrap_or_default().trim().to_owned()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn der(cert: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(cert).unwrap().to_vec()
}

fn hex(serial: u64) -> String {
    format!("{serial:016x}")
}

/// Waits for `what` to hold: the supervisor looks at the files every few seconds.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(Instant::now() < deadline, "still waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A client connected before the rotation goes on calling on its connection; a new connection
/// is shown the new certificate, and hello names its serial.
fn rotation_keeps_connections(layout: Layout) {
    let mut f = Fixture::start(layout);
    let second = f.server_ca.server_serial("second", &[NAME], SECOND);
    std::fs::write(f.dir.path().join("ws/f.txt"), "x\n").unwrap();
    let stat = fsd_proto::v1::StatRequest {
        path: std::fs::canonicalize(f.dir.path().join("ws/f.txt")).unwrap().display().to_string(),
        ..Default::default()
    };
    let rt = runtime();
    let (mut client, hello, link) =
        rt.block_on(connect::open(&f.endpoint(), &f.credentials(&f.client))).unwrap();
    assert_eq!(hello.tls_certificate.as_ref().map(|c| c.serial.clone()), Some(hex(FIRST)));
    assert!(hello.tls_certificate.as_ref().is_some_and(|c| c.not_after > 0));
    rt.block_on(client.stat(stat.clone())).unwrap();
    assert_eq!(rt.block_on(f.presented()), der(&f.dir.path().join("first.pem")));
    // rcgen's certificates are valid until 4096 unless told otherwise.
    let doctor = |serial| format!("TLS certificate: serial {}, expires 4096-01-01 00:00:00 UTC", hex(serial));
    assert_eq!(f.doctor_line(), doctor(FIRST));

    f.files.install(&second.cert, &second.key);
    rt.block_on(until("the new certificate on a new connection", || async {
        f.presented().await == der(&second.cert)
    }));
    let (_, hello, _) = rt.block_on(connect::open(&f.endpoint(), &f.credentials(&f.client))).unwrap();
    assert_eq!(hello.tls_certificate.map(|c| c.serial), Some(hex(SECOND)));
    assert_eq!(f.doctor_line(), doctor(SECOND));
    // The connection made before goes on: the same one, still answering.
    rt.block_on(client.stat(stat)).unwrap();
    assert_eq!(link.connections(), 1, "the client kept its connection across the rotation");
    assert!(
        f.log().contains("TLS certificate rotated: new handshakes use it"),
        "the network process says it rotated: {}",
        f.log()
    );
}

#[test]
fn a_rotated_certificate_reaches_new_connections_and_open_ones_go_on() {
    rotation_keeps_connections(Layout::Files);
}

#[test]
fn a_kubernetes_secret_swapped_through_its_data_link_is_rotated() {
    rotation_keeps_connections(Layout::Kubernetes);
}

/// An unparseable certificate, then a certificate with the key of another: each is refused in
/// one line and the certificate in use stays; the right key then completes the rotation.
#[test]
fn files_that_do_not_load_keep_the_certificate_in_use_and_say_so_once() {
    let f = Fixture::start(Layout::Files);
    let first = der(&f.dir.path().join("first.pem"));
    let second = f.server_ca.server_serial("second", &[NAME], SECOND);
    let refused = "TLS files changed but do not load; keeping the certificate in use";
    let rt = runtime();
    let steps: [(&str, Vec<u8>, &str); 2] = [
        (
            "tls.crt",
            b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n".to_vec(),
            "is not valid PEM",
        ),
        ("tls.crt", std::fs::read(&second.cert).unwrap(), "is not the key of the certificate in tls_cert"),
    ];
    for (n, (name, bytes, why)) in steps.into_iter().enumerate() {
        f.replace(name, &bytes);
        rt.block_on(until(why, || async { f.log().matches(refused).count() == n + 1 }));
        let line = f.log().lines().filter(|l| l.contains(refused)).nth(n).unwrap().to_owned();
        assert!(line.contains(why), "{line}");
        assert!(line.contains(&hex(FIRST)), "the line names the certificate kept: {line}");
        assert_eq!(rt.block_on(f.presented()), first, "{why}: the certificate in use stays");
        let (_, hello, _) = rt.block_on(connect::open(&f.endpoint(), &f.credentials(&f.client))).unwrap();
        assert_eq!(hello.tls_certificate.map(|c| c.serial), Some(hex(FIRST)));
    }
    // The matching key completes the pair: loaded, and nothing more was refused meanwhile.
    f.replace("tls.key", &std::fs::read(&second.key).unwrap());
    rt.block_on(until("the repaired pair", || async { f.presented().await == der(&second.cert) }));
    println!("{}", f.log());
    assert_eq!(f.log().matches(refused).count(), 2, "one line per refused state: {}", f.log());
}

/// A client CA bundle replaced by another CA's: a client of the new CA is admitted on a new
/// connection, a client of the old one no longer is, and a connection the old one made goes on.
#[test]
fn a_rotated_client_ca_admits_the_new_ca_on_new_connections() {
    let f = Fixture::start(Layout::Files);
    let new_ca = pki::Ca::new(f.dir.path(), "client-ca-2");
    let newcomer = new_ca.client("newcomer", "newcomer");
    std::fs::write(f.dir.path().join("ws/f.txt"), "x\n").unwrap();
    let stat = fsd_proto::v1::StatRequest {
        path: std::fs::canonicalize(f.dir.path().join("ws/f.txt")).unwrap().display().to_string(),
        ..Default::default()
    };
    let rt = runtime();
    let (mut old, _, link) = rt.block_on(connect::open(&f.endpoint(), &f.credentials(&f.client))).unwrap();
    rt.block_on(old.stat(stat.clone())).unwrap();
    assert!(
        rt.block_on(connect::open(&f.endpoint(), &f.credentials(&newcomer))).is_err(),
        "a client of a CA not yet trusted is refused"
    );

    f.replace("clients.pem", &std::fs::read(&new_ca.cert).unwrap());
    rt.block_on(until("the new CA's client admitted", || async {
        connect::open(&f.endpoint(), &f.credentials(&newcomer)).await.is_ok()
    }));
    let (mut new, _, _) = rt.block_on(connect::open(&f.endpoint(), &f.credentials(&newcomer))).unwrap();
    rt.block_on(new.stat(stat.clone())).unwrap();
    assert!(
        rt.block_on(connect::open(&f.endpoint(), &f.credentials(&f.client))).is_err(),
        "a client of the CA no longer in the bundle is refused on a new connection"
    );
    rt.block_on(old.stat(stat)).unwrap();
    assert_eq!(link.connections(), 1, "the old CA's client kept its connection");
}
