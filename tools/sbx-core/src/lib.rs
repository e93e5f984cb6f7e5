//! Shared foundation of the sbx tools: one config schema, one audit log, one
//! exit-code table, one way to start a binary. Every tool links this crate.
#![forbid(unsafe_code)]

pub mod apt;
pub mod audit;
pub mod cli;
pub mod config;
pub mod entry;
pub mod error;
pub mod exit;
pub mod glob;
pub mod guestapi;
pub mod hosttools;
pub mod netblock;
pub mod output;

pub use entry::main;
pub use error::{IoContext, SbxError};
pub use exit::Exit;
