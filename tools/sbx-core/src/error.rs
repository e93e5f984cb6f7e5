//! The error trait every tool's error enum implements, so `entry::main` can
//! map any failure to one line on stderr and one exit code.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::Exit;

/// An error that knows its exit status (like coreutils' `UError::code`).
pub trait SbxError: std::error::Error + Send + Sync + 'static {
    fn exit(&self) -> Exit;
}

/// Boxed form used at binary edges.
pub type BoxError = Box<dyn SbxError>;

impl<E: SbxError> From<E> for Box<dyn SbxError> {
    fn from(e: E) -> Self {
        Box::new(e)
    }
}

/// An I/O error with the path it happened on.
#[derive(Debug)]
pub struct PathError {
    pub path: PathBuf,
    pub source: io::Error,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for PathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl SbxError for PathError {
    fn exit(&self) -> Exit {
        io_exit(&self.source)
    }
}

/// Exit status for an I/O error: missing input, permission, or plain I/O.
pub fn io_exit(e: &io::Error) -> Exit {
    match e.kind() {
        io::ErrorKind::NotFound => Exit::NoInput,
        io::ErrorKind::PermissionDenied => Exit::OsErr,
        _ => Exit::IoErr,
    }
}

/// `.with_path(p)` on io results, like coreutils' `map_err_context`.
pub trait IoContext<T> {
    fn with_path(self, path: impl AsRef<Path>) -> Result<T, PathError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn with_path(self, path: impl AsRef<Path>) -> Result<T, PathError> {
        self.map_err(|source| PathError {
            path: path.as_ref().to_path_buf(),
            source,
        })
    }
}

/// A one-off error with a message and status, for the rare case that does
/// not deserve its own enum variant.
#[derive(Debug)]
pub struct Message {
    pub exit: Exit,
    pub message: String,
}

impl Message {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
        }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Message {}

impl SbxError for Message {
    fn exit(&self) -> Exit {
        self.exit
    }
}
