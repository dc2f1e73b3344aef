//! fsd: the daemon that owns the disk of one sandbox and serves the `fsd.v1` file service.
//!
//! `backend` does the filesystem work (one request in, one outcome out); `service` is the gRPC
//! edge that maps wire types to backend values; `daemon` wires config, listeners and shutdown.
#![deny(unsafe_code)]

pub mod backend;
pub mod config;
pub mod daemon;
pub mod error;
pub mod service;
pub mod sys;
