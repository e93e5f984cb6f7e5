//! The server's own Postgres cluster, for a machine with no DATABASE_URL:
//! `initdb` and `pg_ctl` from Debian's postgresql, a unix socket in a 0700
//! directory of the state dir and no TCP at all, so `trust` auth reaches
//! only root and the cluster's own user. The tests start theirs the same way.

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::ServerError;

/// The database role the cluster is made with.
pub const USER: &str = "sbx";

/// A running cluster; stopped on drop.
#[derive(Debug)]
pub struct LocalCluster {
    bin: PathBuf,
    data: PathBuf,
    socket: PathBuf,
    /// Postgres refuses to run as root: as root it runs as this
    /// (uid, gid), the `postgres` user's.
    owner: Option<(u32, u32)>,
}

/// Where Debian keeps the server programs (not on PATH): the newest
/// version's bin directory, else whatever `initdb` PATH has.
fn bin_dir() -> Result<PathBuf, ServerError> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    found.sort();
    if let Some((_, b)) = found.pop() {
        return Ok(b);
    }
    which_initdb().ok_or_else(|| {
        ServerError::Postgres(
            "initdb not found (neither /usr/lib/postgresql/*/bin nor PATH): install postgresql \
             (scripts/prereqs) or set DATABASE_URL"
                .into(),
        )
    })
}

fn which_initdb() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("initdb"))
        .find(|p| p.is_file())
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

/// The `postgres` user's (uid, gid), read from /etc/passwd as a file (the
/// workspace reads no NSS: see clippy.toml).
fn postgres_user() -> Option<(u32, u32)> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && f[0] == "postgres")
            .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

impl LocalCluster {
    /// Make (first time) and start the cluster in `dir`; `dir` must be
    /// traversable by the `postgres` user when running as root.
    pub fn start(dir: &Path) -> Result<Self, ServerError> {
        let bin = bin_dir()?;
        let data = dir.join("data");
        let socket = dir.join("run");
        let owner = if nix::unistd::geteuid().is_root() {
            Some(postgres_user().ok_or_else(|| {
                ServerError::Postgres(
                    "running as root and there is no `postgres` user in /etc/passwd to run the \
                     cluster as: install postgresql (scripts/prereqs) or set DATABASE_URL"
                        .into(),
                )
            })?)
        } else {
            None
        };
        let me = Self {
            bin,
            data,
            socket,
            owner,
        };
        for d in [dir, &me.socket] {
            std::fs::create_dir_all(d).map_err(|e| ServerError::Io(d.to_owned(), e))?;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| ServerError::Io(d.to_owned(), e))?;
            me.give(d)?;
        }
        if !me.data.join("PG_VERSION").exists() {
            me.pg(
                "initdb",
                &[
                    "-D".as_ref(),
                    me.data.as_os_str(),
                    "-U".as_ref(),
                    USER.as_ref(),
                    "--auth=trust".as_ref(),
                    "--no-locale".as_ref(),
                    "-E".as_ref(),
                    "UTF8".as_ref(),
                    "--no-instructions".as_ref(),
                ],
            )?;
        }
        // A cluster left running by an earlier server is used as it is.
        if !me.running() {
            let opts = format!(
                "-c listen_addresses='' -c unix_socket_permissions=0700 -k {}",
                me.socket.display()
            );
            let log = dir.join("postgres.log");
            me.pg(
                "pg_ctl",
                &[
                    "-D".as_ref(),
                    me.data.as_os_str(),
                    "-l".as_ref(),
                    log.as_os_str(),
                    "-w".as_ref(),
                    "-t".as_ref(),
                    "120".as_ref(),
                    "-o".as_ref(),
                    opts.as_ref(),
                    "start".as_ref(),
                ],
            )?;
        }
        Ok(me)
    }

    /// The directory of the cluster's socket (libpq's `host`).
    pub fn socket_dir(&self) -> &Path {
        &self.socket
    }

    /// A connection string for `dbname` on this cluster.
    pub fn url(&self, dbname: &str) -> String {
        format!("host={} user={USER} dbname={dbname}", self.socket.display())
    }

    /// Make database `name` (for tests: one per server on a shared cluster).
    pub fn create_database(&self, name: &str) -> Result<(), ServerError> {
        let sock = self.socket.clone();
        self.pg(
            "createdb",
            &[
                "-h".as_ref(),
                sock.as_os_str(),
                "-U".as_ref(),
                USER.as_ref(),
                name.as_ref(),
            ],
        )
    }

    /// The directory holding the server programs (initdb, pg_ctl, ...).
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    fn running(&self) -> bool {
        self.command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .arg("status")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Stop now (`-m fast`: sessions end, no data lost).
    pub fn stop(&self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    fn give(&self, p: &Path) -> Result<(), ServerError> {
        if let Some((uid, gid)) = self.owner {
            chown(p, Some(uid), Some(gid)).map_err(|e| ServerError::Io(p.to_owned(), e))?;
        }
        Ok(())
    }

    /// `prog` from the bin dir, as the cluster's owner when we are root.
    fn command(&self, prog: &str) -> Command {
        let path = self.bin.join(prog);
        match &self.owner {
            Some((uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg("--")
                    .arg(path);
                c
            }
            None => Command::new(path),
        }
    }

    fn pg(&self, prog: &str, args: &[&std::ffi::OsStr]) -> Result<(), ServerError> {
        let out = self
            .command(prog)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| ServerError::Postgres(format!("{prog}: {e}")))?;
        if out.status.success() {
            return Ok(());
        }
        Err(ServerError::Postgres(format!(
            "{prog} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
