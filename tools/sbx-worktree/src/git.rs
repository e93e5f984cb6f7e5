//! The one side effect that matters, running git, behind a trait so the
//! fail-closed paths can be unit-tested with a recording fake; everything
//! else is tested against the real git (tests/cli.rs).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::WorktreeError;

/// What one git call returned.
#[derive(Debug, Clone, Default)]
pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

pub trait Git {
    /// `git [-c safe.directory=S]... -C cwd args...`
    fn run(&self, cwd: &Path, safe: &[PathBuf], args: &[&OsStr]) -> Result<Out, WorktreeError>;

    /// The program, as a shell word for `--upload-pack`.
    fn program(&self) -> String {
        "git".into()
    }
}

/// The real binary: the root-only one a sandbox image keeps off PATH when
/// this process may run it (the provisioning container runs as root),
/// else `git` on PATH (the guard, for an agent; plain git on a host).
#[derive(Debug, Clone)]
pub struct RealGit {
    pub program: PathBuf,
}

/// Where the sandbox image keeps the real git (base-image/Dockerfile).
pub const SANDBOX_REAL_GIT: &str = "/usr/libexec/sbx/git";

impl RealGit {
    pub fn find() -> Self {
        let real = Path::new(SANDBOX_REAL_GIT);
        let program = if nix::unistd::access(real, nix::unistd::AccessFlags::X_OK).is_ok() {
            real.to_owned()
        } else {
            PathBuf::from("git")
        };
        Self { program }
    }
}

impl Git for RealGit {
    fn program(&self) -> String {
        crate::shelf::shell_quote(&self.program.to_string_lossy())
    }

    fn run(&self, cwd: &Path, safe: &[PathBuf], args: &[&OsStr]) -> Result<Out, WorktreeError> {
        let mut c = Command::new(&self.program);
        for s in safe {
            let mut v = OsString::from("safe.directory=");
            v.push(s);
            c.arg("-c").arg(v);
        }
        c.arg("-C").arg(cwd).args(args);
        // No prompts: a provisioning run has no one to answer them.
        c.env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        let name = self.program.display().to_string();
        let o = c.output().map_err(|e| WorktreeError::NoGit(name, e))?;
        Ok(Out {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        })
    }
}

#[cfg(test)]
pub mod fake {
    //! A git that records each call and answers from a script.
    use super::*;
    use std::cell::RefCell;

    #[derive(Debug, Default)]
    pub struct FakeGit {
        pub calls: RefCell<Vec<String>>,
        /// (argv prefix, answer): the first match answers; else ok, empty.
        pub script: Vec<(String, Out)>,
    }

    impl Git for FakeGit {
        fn run(
            &self,
            _cwd: &Path,
            _safe: &[PathBuf],
            args: &[&OsStr],
        ) -> Result<Out, WorktreeError> {
            let line = args
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ");
            self.calls.borrow_mut().push(line.clone());
            Ok(self
                .script
                .iter()
                .find(|(p, _)| line.starts_with(p.as_str()))
                .map(|(_, o)| o.clone())
                .unwrap_or(Out {
                    ok: true,
                    ..Out::default()
                }))
        }
    }
}
