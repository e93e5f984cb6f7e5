//! The workspace a sandbox is for: a git repository, its canonical path
//! (the source of every name), and its validated config, all settled before
//! any docker command runs.

use std::path::{Path, PathBuf};

use sbx_core::cli::CommonArgs;
use sbx_core::config::{self, Loaded};

use crate::RunError;
use crate::names::Names;

#[derive(Debug, Clone)]
pub struct Workspace {
    pub path: PathBuf,
    pub names: Names,
    pub loaded: Loaded,
}

impl Workspace {
    /// Resolve and check the path, then load its config (exit 78 on error).
    pub fn open(
        common: &CommonArgs,
        path: Option<PathBuf>,
    ) -> Result<Self, sbx_core::error::BoxError> {
        let path = resolve(path)?;
        let env_config = std::env::var_os("SBX_CONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from);
        let loaded = config::discover(common.config.as_deref(), env_config.as_deref(), &path)?;
        Ok(Self {
            names: Names::new(&path, None),
            path,
            loaded,
        })
    }

    /// Where the workspace is mounted inside the sandbox.
    pub fn target(&self) -> String {
        format!("/workspace/{}", self.dir_name())
    }

    /// The directory name as it is (spaces and unicode kept).
    pub fn dir_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "workspace".into())
    }

    pub fn config_dir(&self) -> PathBuf {
        self.path.join(config::DIR)
    }
}

/// Canonical path of a git work tree (a `.git` directory or file).
pub fn resolve(path: Option<PathBuf>) -> Result<PathBuf, RunError> {
    let given = match path {
        Some(p) => p,
        None => std::env::current_dir().map_err(|e| RunError::Io(".".into(), e))?,
    };
    let meta = std::fs::metadata(&given).map_err(|_| RunError::NoWorkspace(given.clone()))?;
    if !meta.is_dir() {
        return Err(RunError::NotADirectory(given));
    }
    let canonical = given
        .canonicalize()
        .map_err(|e| RunError::Io(given.clone(), e))?;
    // From a subdirectory, the sandbox is for the whole repository, as git sees it.
    canonical
        .ancestors()
        .find(|d| is_repo(d))
        .map(Path::to_path_buf)
        .ok_or(RunError::NotARepo(canonical))
}

fn is_repo(p: &Path) -> bool {
    p.join(".git").exists()
}
