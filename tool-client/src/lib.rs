//! fsd-tool-client: the model-facing file tools (read, write, edit, ...) over an fsd daemon.
//! Faces: this library (`Tools`, `Session`), the `fsd-tools` CLI, and the MCP server (`mcp`).
//! Only this crate produces text a model reads.
#![forbid(unsafe_code)]

pub mod attachments;
pub mod cli;
pub mod config;
pub mod connect;
pub mod daemon;
pub mod doctor;
pub mod embedded;
pub mod failure;
pub mod fleet;
pub mod jsonl;
pub mod local_approver;
pub mod mcp;
pub mod record_commands;
pub mod tools;
pub mod web;
pub mod window;

pub use config::ClientConfig;
pub use failure::ToolError;
pub use tools::{Block, Session, ToolResult, Tools};
