//! fsd: the daemon that owns the disk of one sandbox and serves the `fsd.v1` file service.
//!
//! Processes: the `supervisor` starts the `network` process (gRPC, modes, locks; no filesystem
//! rights) and per-mode pools of `worker`s, each confined at birth (`role_confinement`), which run the
//! `backend` (one request in, one outcome out) for the calls `dispatch` routes to them.
#![deny(unsafe_code)]

pub mod approver_client;
pub mod audit;
pub mod backend;
pub mod budget;
pub mod config;
pub mod daemon;
pub mod digest;
pub mod dispatch;
pub mod edge;
pub mod error;
pub mod escalation;
pub mod hung;
pub mod identity;
pub mod ipc_messages;
pub mod metrics;
pub mod network;
pub mod op;
pub mod rest;
pub mod role_confinement;
pub mod service;
pub mod start_checks;
pub mod supervisor;
pub mod sys;
pub mod tls;
pub mod traces;
pub mod worker;
