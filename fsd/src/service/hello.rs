//! Hello: what this daemon serves to this caller (its modes and their enforcement, limits,
//! roots, escalation trust, the TLS certificate in use).

use fsd_proto::v1;
use tonic::{Request, Response};

use super::FsdService;
use super::grant::Caller;
use super::wire::mode_to_wire;
use crate::op::{self, Mode};
use crate::sys;

impl FsdService {
    pub(super) fn hello_reply(&self, request: &Request<v1::HelloRequest>) -> Response<v1::HelloReply> {
        // The modes this caller may reach, not the daemon's global ones.
        let caller = Caller::of(request, None);
        let max_mode = self.max_for(&caller);
        let default_mode = self.default_mode.min(max_mode);
        let limits = self.limits;
        let reports = self.dispatcher.report();
        let modes = reports
            .iter()
            .map(|report| {
                let mode = report.mode;
                let (available, enforcement, reason) = if mode > max_mode {
                    (false, "refused".to_owned(), format!("above this client's maximum mode {}", max_mode.as_str()))
                } else if let Some(reason) = &report.unavailable {
                    (false, "refused".to_owned(), reason.clone())
                } else {
                    let enforcement = report.enforcement.clone().unwrap_or_else(|| "starting".to_owned());
                    let reason = match mode {
                        Mode::DangerFullAccess => "workers keep the daemon's privileges under the seccomp allowlist".to_owned(),
                        _ => format!("{} worker processes confined at birth (uid, capabilities, no_new_privs, Landlock, seccomp); protected names by the resolver", report.live_workers),
                    };
                    (report.live_workers > 0, enforcement, reason)
                };
                v1::ModeStatus { mode: mode_to_wire(mode) as i32, available, enforcement, reason }
            })
            .collect();
        let roots = &self.roots;
        Response::new(v1::HelloReply {
            protocol_version: fsd_proto::PROTOCOL_VERSION,
            daemon_version: env!("CARGO_PKG_VERSION").to_owned(),
            landlock_abi: sys::landlock_abi(),
            modes,
            default_mode: mode_to_wire(default_mode) as i32,
            max_mode: mode_to_wire(max_mode) as i32,
            escalation: self.escalation.as_str().to_owned(),
            limits: Some(v1::Limits {
                max_message_bytes: self.max_message_bytes,
                max_editable_file_bytes: limits.max_editable_bytes,
                max_read_bytes: limits.max_read_bytes,
                max_diff_text_bytes: limits.max_diff_text_bytes,
                max_dir_entries: limits.max_dir_entries as u64,
                max_path_bytes: op::MAX_PATH_BYTES as u64,
            }),
            readable_roots: roots.iter().map(|(p, _)| p.clone()).collect(),
            writable_roots: roots.iter().filter(|(_, w)| *w).map(|(p, _)| p.clone()).collect(),
            protected_names: self.protected.clone(),
            tls_certificate: self.tls.as_ref().map(|tls| {
                let certificate = &tls.get().certificate;
                v1::TlsCertificate { serial: certificate.serial.clone(), not_after: certificate.not_after }
            }),
        })
    }
}
