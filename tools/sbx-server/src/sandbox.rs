//! Each project's workspace and sandbox. The workspace is a git repository
//! the server owns under its state dir (made empty, or cloned from a local
//! repository below `--repo-root`), handed to the agent's uid as a
//! developer's checkout is theirs; the sandbox is started, stopped and
//! removed by a `Backend` (backend.rs: Docker, through sbx-run's library,
//! so it has every guard `sbx-run start` gives). Transitions of one
//! project are serialised by a per-project lock.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use sbx_core::config::StoreUrl;
use serde_json::Value;
use uuid::Uuid;

use crate::backend::{Backend, BackendError, Docker};

/// The agent's uid and gid in every sandbox.
const AGENT: &str = "1000:1000";

#[derive(Debug)]
pub struct Sandboxes {
    root: PathBuf,
    backend: Box<dyn Backend>,
    locks: Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>>,
    /// The server's backup store: each project backs its home up to
    /// `<url>/projects/<id>`. None: backups are off.
    backup: Option<StoreUrl>,
    /// Server environment variables every sandbox gets (the store's
    /// credentials), as `[environment].pass`.
    backup_pass: Vec<String>,
    caps: crate::config::Caps,
}

/// A project's new SSH key pair, from [`Sandboxes::new_ssh_key`].
#[derive(Debug)]
pub struct NewKey {
    pub private: String,
    pub public: String,
    pub host_key: String,
    pub fingerprint: String,
}

/// `SHA256:…` of a public key's base64 blob, as `ssh-keygen -l` prints it.
fn fingerprint(blob: &str) -> Result<String, String> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .map_err(|e| format!("sshd's host key: {e}"))?;
    let d = ring::digest::digest(&ring::digest::SHA256, &raw);
    Ok(format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(d.as_ref())
    ))
}

/// What a server-side `sbx-backup` run failed with.
#[derive(Debug)]
pub enum BackupError {
    /// No snapshot (of that id) in the project's store.
    NoSnapshot(String),
    Failed(BackendError),
}

fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
    let mut c = Command::new("git");
    c.args([
        "-c",
        "user.name=sbx-server",
        "-c",
        "user.email=sbx-server@localhost",
    ])
    .args(args)
    .current_dir(dir);
    run(&mut c, &format!("git {}", args.first().unwrap_or(&"")))
}

/// Run `c`; its stderr is the error.
fn run(c: &mut Command, what: &str) -> Result<(), String> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Sandboxes {
    pub fn new(
        root: PathBuf,
        backup: Option<StoreUrl>,
        backup_pass: Vec<String>,
        caps: crate::config::Caps,
    ) -> Self {
        Self {
            root,
            backend: Box::new(Docker),
            locks: Mutex::new(HashMap::new()),
            backup,
            backup_pass,
            caps,
        }
    }

    /// The same service over another backend (tests; a Kubernetes one).
    pub fn with_backend(mut self, backend: Box<dyn Backend>) -> Self {
        self.backend = backend;
        self
    }

    /// Whether projects have a backup store.
    pub fn backups(&self) -> bool {
        self.backup.is_some()
    }

    /// The lock that serialises transitions of project `id`.
    pub fn lock(&self, id: Uuid) -> Arc<tokio::sync::Mutex<()>> {
        let mut l = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(l.entry(id).or_default())
    }

    pub fn forget(&self, id: Uuid) {
        self.locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }

    fn project_dir(&self, id: Uuid) -> PathBuf {
        self.root.join(id.to_string())
    }

    /// The workspace of project `id`; its directory name is what sbx-run
    /// names the sandbox after.
    pub fn workspace(&self, id: Uuid) -> PathBuf {
        self.project_dir(id)
            .join(format!("project-{}", id.simple()))
    }

    /// Make the workspace: a clone of `repo`, or a fresh repository with
    /// one empty commit, given to the agent's uid. Blocking.
    pub fn create(&self, id: Uuid, repo: Option<&Path>) -> Result<(), String> {
        let dir = self.project_dir(id);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let ws = self.workspace(id);
        let made = match repo {
            Some(src) => {
                let (s, w) = (src.to_string_lossy(), ws.to_string_lossy());
                // No hard links: the project's objects must not be the
                // source repository's inodes, which the agent would share.
                git(&dir, &["clone", "--quiet", "--no-hardlinks", "--", &s, &w])
            }
            None => std::fs::create_dir(&ws)
                .map_err(|e| format!("{}: {e}", ws.display()))
                .and_then(|()| git(&ws, &["init", "--quiet", "-b", "main"]))
                .and_then(|()| {
                    git(
                        &ws,
                        &["commit", "--quiet", "--allow-empty", "-m", "New project"],
                    )
                }),
        };
        let given =
            made.and_then(|()| run(Command::new("chown").args(["-R", AGENT]).arg(&ws), "chown"));
        if given.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        given
    }

    /// Start the sandbox (its `.agent-sandbox` made on the first start)
    /// under `config` (None: sbx's template); the container's name.
    /// Blocking.
    /// `ssh`: the project's public key, the one sshd lets in (None: no
    /// sshd).
    pub fn start(
        &self,
        id: Uuid,
        config: Option<&str>,
        ssh: Option<&str>,
    ) -> Result<String, BackendError> {
        let ws = self.workspace(id);
        self.backend.create(&ws)?;
        if let Some(public) = ssh {
            self.ssh_keys(id)
                .authorize(public)
                .map_err(|e| e.to_string())?;
        }
        self.write_config(
            id,
            config.unwrap_or(sbx_run::image::CONFIG_TEMPLATE),
            ssh.is_some(),
        )?;
        self.backend.start(&ws)
    }

    /// sbx-run's SSH files of project `id`'s sandbox (its host key, the
    /// public key let in), in the server's state, named after the sandbox.
    fn ssh_keys(&self, id: Uuid) -> sbx_run::ssh::Keys {
        let ws = self.workspace(id);
        let canonical = ws.canonicalize().unwrap_or(ws);
        sbx_run::ssh::Keys::of(&sbx_run::names::Names::new(&canonical, None).container)
    }

    /// A new key pair for project `id`, its public half the one let in
    /// from the next start: (private key, public key line, sshd's host
    /// key line, its fingerprint). The private key is written nowhere
    /// but a scratch directory removed before this returns. Blocking.
    pub fn new_ssh_key(&self, id: Uuid) -> Result<NewKey, String> {
        let dir = self.project_dir(id);
        let comment = format!("sbx-server {id}");
        let (private, public) =
            sbx_run::ssh::new_pair(&dir, &comment).map_err(|e| e.to_string())?;
        let host = self
            .ssh_keys(id)
            .authorize(&public)
            .map_err(|e| e.to_string())?;
        let blob = host.split_whitespace().nth(1).unwrap_or_default();
        let fingerprint = fingerprint(blob)?;
        Ok(NewKey {
            private,
            public: public.trim().to_owned(),
            host_key: format!("ssh-ed25519 {blob}"),
            fingerprint,
        })
    }

    /// Whether the backend publishes sshd (Docker does, Kubernetes not yet).
    pub fn ssh(&self) -> bool {
        self.backend.ssh()
    }

    /// Where project `id`'s running sandbox's sshd is published. Blocking.
    pub fn ssh_endpoint(&self, id: Uuid) -> Result<Option<(String, u16)>, BackendError> {
        self.backend.ssh_endpoint(&self.workspace(id))
    }

    /// The project's `.agent-sandbox/config.toml`, written by the server at
    /// every start (over whatever a cloned repository brought): sbx's
    /// template with the keys the server owns set, checked by sbx-core's
    /// parser. No agent runs while it is written (the sandbox is stopped,
    /// and mounts the directory read-only when it runs); links are not
    /// followed all the same, the workspace being the agent's.
    fn write_config(&self, id: Uuid, base: &str, ssh: bool) -> Result<(), String> {
        let dir = self.workspace(id).join(sbx_core::config::DIR);
        let at = |e: std::io::Error, p: &Path| format!("{}: {e}", p.display());
        let meta = std::fs::symlink_metadata(&dir).map_err(|e| at(e, &dir))?;
        if !meta.is_dir() {
            return Err(format!("{}: not a directory", dir.display()));
        }
        let file = dir.join("config.toml");
        let text = self.config_text(id, base, &file, ssh)?;
        // Unchanged, it is left as it is: a new inode under the sandbox's
        // mount of it makes sbx-run make the container anew.
        let same = std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file())
            && std::fs::read_to_string(&file).is_ok_and(|t| t == text);
        if same {
            return Ok(());
        }
        let tmp = dir.join(".config.toml.sbx-server");
        let _ = std::fs::remove_file(&tmp);
        // create_new: O_EXCL, so a link in its place is not followed.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| at(e, &tmp))?;
        f.write_all(text.as_bytes()).map_err(|e| at(e, &tmp))?;
        drop(f);
        std::fs::rename(&tmp, &file).map_err(|e| at(e, &file))
    }

    /// `base` with the server's keys set: `[backup].url` the project's
    /// prefix of the server's store, its credentials' names added to
    /// `[environment].pass`. Checked by sbx-core's parser.
    fn config_text(&self, id: Uuid, base: &str, file: &Path, ssh: bool) -> Result<String, String> {
        let parsed = sbx_core::config::parse_toml(base, file).map_err(|e| e.to_string())?;
        let over_cpus = parsed.sandbox.cpus.0 > self.caps.cpus;
        let over_memory = parsed.sandbox.memory.bytes > self.caps.memory.bytes;
        let ssh_differs = parsed.ssh.enabled != ssh;
        // The idle loop snapshots (seed 001 keeps the last five): on
        // Docker, a config that says nothing keeps that many, not all.
        let keep_unset =
            self.backend.prunes_snapshots() && parsed.lifecycle.keep_snapshots.is_none();
        if self.backup.is_none() && !over_cpus && !over_memory && !ssh_differs && !keep_unset {
            return Ok(base.to_owned());
        }
        let mut t: toml::Table = base.parse().map_err(|e| format!("config: {e}"))?;
        let table = |t: &mut toml::Table, k: &str| -> Result<toml::Table, String> {
            match t.remove(k) {
                None => Ok(toml::Table::new()),
                Some(toml::Value::Table(x)) => Ok(x),
                Some(_) => Err(format!("config: [{k}] is not a table")),
            }
        };
        // What a config asks for was checked against the caps when the
        // project was made; sbx's defaults (asked by none) are capped here.
        let mut sb = table(&mut t, "sandbox")?;
        if over_cpus {
            sb.insert("cpus".into(), self.caps.cpus.into());
        }
        if over_memory {
            sb.insert("memory".into(), self.caps.memory.text.clone().into());
        }
        t.insert("sandbox".into(), sb.into());
        // sshd only for a project made with SSH, whose key the server set:
        // anything else would make sbx-run keep a private key on disk.
        if ssh_differs {
            let mut x = table(&mut t, "ssh")?;
            x.insert("enabled".into(), ssh.into());
            t.insert("ssh".into(), x.into());
        }
        if keep_unset {
            let mut l = table(&mut t, "lifecycle")?;
            l.insert("keep-snapshots".into(), KEEP_SNAPSHOTS.into());
            t.insert("lifecycle".into(), l.into());
        }
        if let Some(url) = &self.backup {
            let prefix = url.child("projects", &id.to_string())?;
            let mut b = table(&mut t, "backup")?;
            b.insert("url".into(), prefix.text.clone().into());
            t.insert("backup".into(), b.into());
        }
        if self.backup.is_some() && !self.backup_pass.is_empty() {
            let mut e = table(&mut t, "environment")?;
            let mut pass = match e.remove("pass") {
                Some(toml::Value::Array(a)) => a,
                _ => Vec::new(),
            };
            for n in &self.backup_pass {
                if !pass.iter().any(|v| v.as_str() == Some(n)) {
                    pass.push(n.clone().into());
                }
            }
            e.insert("pass".into(), pass.into());
            t.insert("environment".into(), e.into());
        }
        let text = toml::to_string(&t).map_err(|e| format!("config: {e}"))?;
        sbx_core::config::parse_toml(&text, file).map_err(|e| e.to_string())?;
        Ok(text)
    }

    /// Run `sbx-backup --json ARGS` as the agent in project `id`'s running
    /// sandbox, through the guest API as `sbx-run exec` does: the `data`
    /// of its last JSON line. Blocking.
    pub fn backup(&self, id: Uuid, args: &[&str]) -> Result<Value, BackupError> {
        let fail = |m: String| BackupError::Failed(m.into());
        let argv: Vec<OsString> = ["sbx-backup", "--json"]
            .iter()
            .chain(args)
            .map(OsString::from)
            .collect();
        let x = self
            .backend
            .exec(&self.workspace(id), &argv, "sbx-server")
            .map_err(BackupError::Failed)?;
        let (out, err) = (x.stdout, String::from_utf8_lossy(&x.stderr).into_owned());
        let last = |t: &str| {
            t.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::to_owned)
        };
        if x.status != 0 {
            let why = last(&err).unwrap_or_else(|| format!("exit {}", x.status));
            // sbx-backup's exit 66: no snapshot.
            return Err(if x.status == 66 {
                BackupError::NoSnapshot(why)
            } else {
                fail(format!("sbx-backup {}: {why}", args.join(" ")))
            });
        }
        let lines: Vec<Value> = String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|mut v| v["data"].take())
            .collect();
        match args.first() {
            Some(&"snapshots") => Ok(Value::Array(lines)),
            _ => lines
                .into_iter()
                .next_back()
                .ok_or_else(|| fail(format!("sbx-backup {}: no report", args.join(" ")))),
        }
    }

    /// Restore project `id`'s home from `snapshot` (None: the newest) the
    /// way a user does, `sbx-backup restore --force` as the agent in the
    /// sandbox: started for it, a backup of the home as it was taken
    /// first (which also waits out the daemon's first pass), stopped after
    /// (its final sync makes the restored home the newest snapshot).
    /// Returns the snapshot restored. Blocking.
    pub fn restore(
        &self,
        id: Uuid,
        config: Option<&str>,
        ssh: Option<&str>,
        snapshot: Option<&str>,
    ) -> Result<String, BackupError> {
        let fail = BackupError::Failed;
        self.start(id, config, ssh).map_err(fail)?;
        let done = (|| {
            // Chosen before the backup below, which becomes the newest.
            let list = self.backup(id, &["snapshots"])?;
            let ids: Vec<&str> = list
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["id"].as_str())
                .collect();
            let pick = match snapshot {
                Some(s) => ids.iter().find(|i| **i == s).copied(),
                None => ids.iter().max().copied(),
            };
            let Some(pick) = pick.map(str::to_owned) else {
                return Err(BackupError::NoSnapshot(match snapshot {
                    Some(s) => format!("no snapshot {s} in this project's store"),
                    None => "this project's store has no snapshot yet".into(),
                }));
            };
            self.backup(id, &["sync"])?;
            self.backup(id, &["restore", "--force", "--snapshot", &pick])?;
            Ok(pick)
        })();
        let stopped = self.stop(id);
        let pick = done?;
        stopped.map_err(fail)?;
        Ok(pick)
    }

    /// Project `id`'s sandbox as its backend sees it: its name and
    /// whether it runs, None when there is none, Err when the engine did
    /// not answer. Blocking.
    pub fn container(&self, id: Uuid) -> Result<Option<(String, bool)>, BackendError> {
        self.backend.status(&self.workspace(id))
    }

    /// Stop the sandbox: the guest's backup daemon makes its final sync
    /// when backups are configured. Blocking.
    pub fn stop(&self, id: Uuid) -> Result<(), BackendError> {
        self.backend.stop(&self.workspace(id))
    }

    /// A snapshot of project `id`'s whole sandbox (its system state, and
    /// its home's backup with it), tagged `tag`; its id. Blocking.
    pub fn snapshot(&self, id: Uuid, tag: Option<&str>) -> Result<String, BackendError> {
        self.backend.snapshot(&self.workspace(id), tag)
    }

    /// Stop and remove the sandbox, its volumes and image, then the
    /// workspace. Blocking.
    pub fn remove(&self, id: Uuid) -> Result<(), BackendError> {
        let ws = self.workspace(id);
        if ws.exists() {
            self.stop(id)?;
            self.backend.delete(&ws)?;
        }
        let dir = self.project_dir(id);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("{}: {e}", dir.display()).into())
            }
            _ => Ok(()),
        }
    }
}

impl Sandboxes {
    /// Where project `id`'s terminal sessions are recorded: beside the
    /// workspace, in the server's part of the project's directory, where
    /// the agent (which owns only the workspace) cannot write.
    pub fn sessions_dir(&self, id: Uuid) -> PathBuf {
        self.project_dir(id).join("sessions")
    }

    /// Project `id`'s terminal: where it is, or connected. Blocking.
    pub fn terminal_target(&self, id: Uuid) -> Result<sbx_terminal::Target, BackendError> {
        self.backend.terminal(&self.workspace(id))
    }
}

/// Snapshots a project keeps when its config names no number.
const KEEP_SNAPSHOTS: i64 = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Exec;

    /// A backend that records the calls, and at `start` what the
    /// service had written by then.
    #[derive(Debug, Default, Clone)]
    struct Recording(Arc<Mutex<Vec<String>>>);

    impl Recording {
        fn note(&self, s: String) {
            self.0.lock().unwrap().push(s);
        }
    }

    impl Backend for Recording {
        fn create(&self, ws: &Path) -> crate::backend::Result<()> {
            std::fs::create_dir_all(ws.join(sbx_core::config::DIR)).map_err(|e| e.to_string())?;
            self.note("create".into());
            Ok(())
        }
        fn start(&self, ws: &Path) -> crate::backend::Result<String> {
            let cfg = ws.join(sbx_core::config::DIR).join("config.toml");
            let text = std::fs::read_to_string(cfg).unwrap_or_default();
            self.note(format!("start with config: {}", !text.is_empty()));
            Ok("sandbox-name".into())
        }
        fn stop(&self, _: &Path) -> crate::backend::Result<()> {
            self.note("stop".into());
            Ok(())
        }
        fn delete(&self, _: &Path) -> crate::backend::Result<()> {
            self.note("delete".into());
            Ok(())
        }
        fn status(&self, _: &Path) -> crate::backend::Result<Option<(String, bool)>> {
            Ok(None)
        }
        fn exec(&self, _: &Path, argv: &[OsString], _: &str) -> crate::backend::Result<Exec> {
            self.note(format!("exec {argv:?}"));
            Ok(Exec {
                status: 66,
                stdout: Vec::new(),
                stderr: b"sbx-backup: error: no snapshot\n".to_vec(),
            })
        }
        fn terminal(&self, _: &Path) -> crate::backend::Result<sbx_terminal::Target> {
            Err(String::from("none").into())
        }
        fn snapshot(&self, _: &Path, _: Option<&str>) -> crate::backend::Result<String> {
            Ok(String::new())
        }
        fn start_from_snapshot(&self, _: &Path, _: Option<&str>) -> crate::backend::Result<String> {
            Ok(String::new())
        }
    }

    /// The service's side of a start, stop, backup and removal, over the
    /// seam: the config is written before the backend starts anything,
    /// and a backend's exit 66 is "no snapshot".
    #[test]
    fn the_service_drives_its_backend() {
        let t = tempfile::tempdir().unwrap();
        let rec = Recording::default();
        let caps = crate::config::Caps {
            cpus: 64.0,
            memory: sbx_core::config::Size {
                text: "64g".into(),
                bytes: 64 << 30,
            },
        };
        let s = Sandboxes::new(t.path().to_owned(), None, Vec::new(), caps)
            .with_backend(Box::new(rec.clone()));
        let id = Uuid::new_v4();
        std::fs::create_dir_all(s.workspace(id)).unwrap();
        assert_eq!(s.start(id, None, None).unwrap(), "sandbox-name");
        assert!(matches!(
            s.backup(id, &["snapshots"]),
            Err(BackupError::NoSnapshot(_))
        ));
        assert_eq!(s.container(id).unwrap(), None);
        s.remove(id).unwrap();
        assert!(!t.path().join(id.to_string()).exists());
        assert_eq!(
            *rec.0.lock().unwrap(),
            [
                "create",
                "start with config: true",
                "exec [\"sbx-backup\", \"--json\", \"snapshots\"]",
                "stop",
                "delete"
            ]
        );
    }
}
