//! Direct gRPC access to a test daemon, for provider-level checks (stat, listDir, readText, ...),
//! on a current-thread tokio runtime owned by the helper.

use std::path::Path;

use fsd_proto::v1::{self, fsd_client::FsdClient};
use fsd_tool_client::connect::{self, Endpoint};
use tonic::transport::Channel;

use super::Daemon;

/// A connected gRPC client and the runtime that drives it.
pub struct Rpc {
    pub rt: tokio::runtime::Runtime,
    pub client: FsdClient<Channel>,
    pub hello: v1::HelloReply,
}

/// A path as the daemon expects it (absolute, UTF-8).
pub fn p(path: &Path) -> String {
    path.to_str().expect("UTF-8 test path").to_owned()
}

/// The daemon's gRPC health answer for `service` ("" for the whole daemon).
pub fn health(d: &Daemon, service: &str) -> tonic_health::pb::health_check_response::ServingStatus {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let endpoint = Endpoint::Unix(d.socket.clone());
        let channel = connect::channel(&endpoint).await.expect("connect to fsd");
        let reply = HealthClient::new(channel)
            .check(HealthCheckRequest { service: service.to_owned() })
            .await
            .expect("health answer")
            .into_inner();
        tonic_health::pb::health_check_response::ServingStatus::try_from(reply.status)
            .expect("a known status")
    })
}

impl Rpc {
    pub fn connect(d: &Daemon) -> Rpc {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let (client, hello) =
            rt.block_on(connect::connect(&Endpoint::Unix(d.socket.clone()))).expect("connect to fsd");
        Rpc { rt, client, hello }
    }

    pub fn stat(&mut self, path: &Path) -> Result<v1::StatReply, tonic::Status> {
        let request = v1::StatRequest { path: p(path), ..Default::default() };
        self.rt.block_on(self.client.stat(request)).map(tonic::Response::into_inner)
    }

    /// The version of an existing file.
    pub fn version(&mut self, path: &Path) -> String {
        let reply = self.stat(path).expect("stat");
        reply.info.expect("file exists").version
    }

    pub fn list_dir(&mut self, path: &Path) -> Result<v1::ListDirReply, tonic::Status> {
        let request = v1::ListDirRequest { path: p(path), ..Default::default() };
        self.rt.block_on(self.client.list_dir(request)).map(tonic::Response::into_inner)
    }

    pub fn read_text(&mut self, path: &Path, max_bytes: u64) -> Result<v1::ReadTextReply, tonic::Status> {
        let request = v1::ReadTextRequest { path: p(path), max_bytes, ..Default::default() };
        self.rt.block_on(self.client.read_text(request)).map(tonic::Response::into_inner)
    }

    pub fn write_text(
        &mut self,
        path: &Path,
        content: &str,
        guard: Option<v1::write_guard::Kind>,
    ) -> Result<v1::WriteTextReply, tonic::Status> {
        let request = v1::WriteTextRequest {
            path: p(path),
            content: content.to_owned(),
            guard: guard.map(|kind| v1::WriteGuard { kind: Some(kind) }),
            match_existing_style: false,
            ..Default::default()
        };
        self.rt.block_on(self.client.write_text(request)).map(tonic::Response::into_inner)
    }

    pub fn edit_text(
        &mut self,
        path: &Path,
        old: &str,
        new: &str,
        guard: Option<v1::EditGuard>,
    ) -> Result<v1::EditTextReply, tonic::Status> {
        let request = v1::EditTextRequest {
            path: p(path),
            old_string: old.to_owned(),
            new_string: new.to_owned(),
            replace_all: false,
            guard,
            ..Default::default()
        };
        self.rt.block_on(self.client.edit_text(request)).map(tonic::Response::into_inner)
    }
}

/// The fsd error a status carries (panics when it carries none).
#[track_caller]
pub fn wire(status: &tonic::Status) -> fsd_proto::WireError {
    fsd_proto::WireError::from_status(status)
        .unwrap_or_else(|| panic!("status without an fsd ErrorInfo: {status:?}"))
}
