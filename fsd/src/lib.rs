//! fsd: the daemon that owns the disk of one sandbox and serves the `fsd.v1` file service.
//!
//! Processes: the `supervisor` starts the `network` process (gRPC, modes, locks; no filesystem
//! rights) and per-mode pools of `worker`s, each confined at birth (`confine`), which run the
//! `backend` (one request in, one outcome out) for the calls `dispatch` routes to them.
#![deny(unsafe_code)]

pub mod approver;
pub mod audit;
pub mod backend;
pub mod budget;
pub mod config;
pub mod confine;
pub mod daemon;
pub mod digest;
pub mod dispatch;
pub mod edge;
pub mod error;
pub mod escalation;
pub mod hung;
pub mod identity;
pub mod ipc;
pub mod metrics;
pub mod network;
pub mod op;
pub mod preflight;
pub mod rest;
pub mod service;
pub mod supervisor;
pub mod sys;
pub mod tls;
pub mod traces;
pub mod worker;
