//! The shelf: SHELF/repo (one clone, no checkout of its own) and
//! SHELF/worktrees/<branchSan>. Every input is checked before the first
//! change; a clone is made aside and renamed into place, so a failed
//! provisioning leaves no half-made repository.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sbx_core::audit::{self, Outcome, Record};
use sbx_core::cli::CommonArgs;
use sbx_core::{output, sanitize_branch};
use serde::Serialize;
use serde_json::json;

use crate::WorktreeError as E;
use crate::git::{Call, Git, Out};
use crate::lock;

/// Every transport names the program itself: a `remote.<url>.uploadpack`
/// in the shelf's config (a remote named like the URL) would be used.
const UPLOAD_PACK: &str = "--upload-pack=git-upload-pack";

/// The caller's uid and gid.
pub fn caller() -> (u32, u32) {
    (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    )
}

/// Who owns the shelf directory (the caller when it does not exist yet).
pub fn owner_of(dir: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir)
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or_else(|_| caller())
}

#[derive(Debug, Clone, Serialize)]
pub struct Provisioned {
    pub branch: String,
    /// "created" or "reused".
    pub worktree: &'static str,
    /// "cloned" or "reused".
    pub repo: &'static str,
    pub path: PathBuf,
    pub repo_path: PathBuf,
    /// Where `git push` goes: host/<branch>.
    pub upstream: String,
    /// What a new branch started from (origin/<branch> or the default branch).
    pub base: Option<String>,
    pub host: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Entry {
    pub branch: Option<String>,
    pub path: PathBuf,
    pub head: String,
    pub prunable: bool,
}

pub struct Shelf<'a> {
    git: &'a dyn Git,
    pub dir: PathBuf,
    owner: (u32, u32),
    origin_from_host: bool,
    keep_existing: bool,
}

impl<'a> Shelf<'a> {
    pub fn new(git: &'a dyn Git, dir: &Path, owner: (u32, u32)) -> Self {
        Self {
            git,
            dir: dir.to_owned(),
            owner,
            origin_from_host: false,
            keep_existing: false,
        }
    }

    /// Reuse a branch's worktree that exists as it is: no fetch, no
    /// remote or upstream set (a start; `sbx-run checkout` refreshes).
    pub fn keep_existing(mut self, on: bool) -> Self {
        self.keep_existing = on;
        self
    }

    /// Take origin's branches from the host's remote-tracking refs rather
    /// than from origin itself: provisioning needs no network.
    pub fn origin_from_host(mut self, on: bool) -> Self {
        self.origin_from_host = on;
        self
    }

    pub fn repo(&self) -> PathBuf {
        self.dir.join("repo")
    }

    pub fn worktree(&self, branch: &str) -> PathBuf {
        self.dir.join("worktrees").join(sanitize_branch(branch))
    }

    /// The paths git may be asked to trust (its ownership check): exactly
    /// the shelf's clone and worktrees, and the host checkout, never `*`.
    fn safe(&self, extra: &[&Path]) -> Vec<PathBuf> {
        let mut v = vec![self.repo(), self.repo().join(".git")];
        v.extend(extra.iter().map(|p| p.to_path_buf()));
        v
    }

    fn git(&self, cwd: &Path, extra: &[&Path], args: &[&str]) -> Result<Out, E> {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        self.git.run(cwd, &self.safe(extra), &args)
    }

    /// Run git; a failure is an error naming the command and git's words.
    fn must(&self, cwd: &Path, extra: &[&Path], args: &[&str]) -> Result<String, E> {
        let o = self.git(cwd, extra, args)?;
        if o.ok {
            Ok(o.stdout)
        } else {
            Err(git_failed(args, &o))
        }
    }

    /// Refuse a shelf that belongs to someone else (its files would be
    /// theirs to change under us); audited, like every sbx refusal.
    fn check_owner(&self) -> Result<(), E> {
        use std::os::unix::fs::MetadataExt;
        let Ok(m) = std::fs::metadata(&self.dir) else {
            return Ok(());
        };
        let me = caller().0;
        if m.uid() == self.owner.0 || m.uid() == me {
            return Ok(());
        }
        let target = self.dir.to_string_lossy();
        audit::append(
            &Record::new(
                "sbx-worktree",
                "shelf",
                &target,
                Outcome::Blocked,
                "foreign-shelf",
            )
            .reason("the shelf belongs to another uid"),
        );
        Err(E::ForeignShelf(self.dir.clone(), m.uid(), self.owner.0))
    }

    /// Read-only calls that need nothing of each other, at once (each a
    /// process): `(cwd, extra safe paths, args)`; the answers in order.
    fn git_all(&self, calls: &[(&Path, &[&Path], &[&str])]) -> Result<Vec<Out>, E> {
        let calls: Vec<Call<'_>> = calls
            .iter()
            .map(|(cwd, extra, args)| {
                (
                    *cwd,
                    self.safe(extra),
                    args.iter().map(OsStr::new).collect(),
                )
            })
            .collect();
        self.git.run_all(&calls).into_iter().collect()
    }

    fn check_branch(&self, branch: &str) -> Result<(), E> {
        let o = self.git(&self.dir_or_root(), &[], &check_ref_format(branch))?;
        judge_branch(branch, &o)
    }

    fn dir_or_root(&self) -> PathBuf {
        if self.dir.is_dir() {
            self.dir.clone()
        } else {
            PathBuf::from("/")
        }
    }

    /// The host checkout (canonical), validated: a work tree's top level,
    /// on a branch, with commits. `all` answered HOST_CHECK: when all is
    /// well that is the one call; the separate checks below only say what
    /// is not.
    fn judge_host(&self, host: PathBuf, all: &Out) -> Result<PathBuf, E> {
        let extra = [host.as_path(), &host.join(".git")];
        let lines: Vec<&str> = all.stdout.lines().collect();
        if all.ok
            && lines.first().is_some_and(|t| Path::new(t) == host)
            && lines.get(1).is_some_and(|h| h.starts_with("refs/"))
        {
            return Ok(host);
        }
        let top = self.git(&host, &extra, &["rev-parse", "--show-toplevel"])?;
        if !top.ok || Path::new(top.stdout.trim_end()) != host {
            let why = top.stderr.lines().last().unwrap_or("").trim().to_owned();
            let uid = if caller().0 == 0 {
                self.owner.0
            } else {
                caller().0
            };
            return Err(E::NotARepo(host, uid, why));
        }
        let head = self.git(&host, &extra, &["symbolic-ref", "-q", "HEAD"])?;
        if !head.ok {
            return Err(E::Detached(host));
        }
        let born = self.git(
            &host,
            &extra,
            &["rev-parse", "-q", "--verify", "HEAD^{commit}"],
        )?;
        if !born.ok {
            return Err(E::Unborn(host));
        }
        Ok(host)
    }

    pub fn provision(&self, host: &Path, branch: &str, wait: Duration) -> Result<Provisioned, E> {
        // Every check before the first change.
        self.check_owner()?;
        if !host.is_dir() {
            self.check_branch(branch)?;
            return Err(E::NoHost(host.to_owned()));
        }
        let host = host.canonicalize().map_err(|e| E::Io(host.to_owned(), e))?;
        let hosts = [host.as_path(), &host.join(".git")];
        // The name, the host and its origin asked at once.
        let name = check_ref_format(branch);
        let asked = self.git_all(&[
            (&self.dir_or_root(), &[], &name),
            (&host, &hosts, HOST_CHECK),
            (&host, &hosts, &["remote", "get-url", "origin"]),
        ])?;
        let [name, all, origin] = <[Out; 3]>::try_from(asked).map_err(|v| {
            E::Git(
                "rev-parse".into(),
                format!("{} answers to 3 calls", v.len()),
            )
        })?;
        judge_branch(branch, &name)?;
        let host = self.judge_host(host.clone(), &all)?;
        let host_url = format!("file://{}", host.display());
        let has_origin = origin.ok && !origin.stdout.trim().is_empty();
        let source = if has_origin {
            origin.stdout.trim().to_owned()
        } else {
            host_url.clone()
        };
        let mirror = self.origin_from_host && has_origin;

        self.make_dir(&self.dir)?;
        let _lock = lock::acquire(&self.dir.join(".lock"), wait)?;
        // A fresh volume is root's: the agent gets the shelf (not what is
        // in it that it did not make, such as another user's files).
        if caller().0 == 0 && self.owner.0 != 0 {
            for p in [self.dir.clone(), self.dir.join(".lock")] {
                std::os::unix::fs::lchown(&p, Some(self.owner.0), Some(self.owner.1))
                    .map_err(|e| E::Io(p.clone(), e))?;
            }
        }
        let cfg = self.check_config()?;
        let cfg = cfg.as_ref();
        let repo = self.repo();
        let wt = self.worktree(branch);
        let extra = [host.as_path(), &host.join(".git"), wt.as_path()];
        if self.keep_existing && repo.join(".git").exists() && wt.exists() {
            // A start: the worktree as it is, if it is this branch's.
            self.owned_by(&wt, branch)?;
            return Ok(Provisioned {
                branch: branch.to_owned(),
                worktree: "reused",
                repo: "reused",
                path: wt,
                repo_path: repo,
                upstream: format!("host/{branch}"),
                base: None,
                host: host_url,
            });
        }

        // The clone's refs when they are the host's already (no fetch).
        let mut known: Option<Vec<Ref>> = None;
        let repo_state = if repo.join(".git").exists() {
            // Keep origin in step with the host's, then fetch.
            self.set_remote(&repo, &extra, "origin", &source, cfg)?;
            if mirror || source == host_url {
                // What a fetch from the host would change, asked first.
                let local = format!("refs/heads/{branch}");
                let mut a = vec![
                    "for-each-ref",
                    REF_FORMAT,
                    "refs/remotes/origin/",
                    "refs/tags/",
                ];
                a.push(&local);
                let mut b = vec!["for-each-ref", REF_FORMAT, "refs/remotes/origin/"];
                if !mirror {
                    b = vec!["for-each-ref", REF_FORMAT, "refs/heads/", "refs/tags/"];
                }
                let both = self.git_all(&[(&repo, &extra, &a), (&host, &extra, &b)])?;
                let [ours, theirs] = <[Out; 2]>::try_from(both).map_err(|v| {
                    E::Git(
                        "for-each-ref".into(),
                        format!("{} answers to 2 calls", v.len()),
                    )
                })?;
                for (o, args) in [(&ours, &a), (&theirs, &b)] {
                    if !o.ok {
                        return Err(git_failed(args, o));
                    }
                }
                let (ours, theirs) = (parse_refs(&ours.stdout), parse_refs(&theirs.stdout));
                if in_step(mirror, &theirs, &ours, cfg) {
                    known = Some(ours);
                }
            }
            if !mirror && known.is_none() {
                // The program named, not the remote's (its config is the shelf's).
                self.must(
                    &repo,
                    &extra,
                    &["fetch", "--quiet", "--prune", UPLOAD_PACK, "origin"],
                )?;
            }
            "reused"
        } else {
            self.clone_into(
                &repo,
                &extra,
                if mirror { &host_url } else { &source },
                mirror,
            )?;
            self.set_remote(&repo, &extra, "origin", &source, None)?;
            "cloned"
        };
        if mirror && known.is_none() {
            self.origin_from(&repo, &extra, &host, &host_url)?;
        }
        self.set_remote(&repo, &extra, "host", &host_url, cfg)?;
        // The clone's own HEAD detached, so no branch (the host's main
        // above all) is held by the clone rather than a worktree; asked of
        // git unless its HEAD file names an object (as it does once done).
        if !head_file_detached(&repo)
            && self.git(&repo, &extra, &["symbolic-ref", "-q", "HEAD"])?.ok
        {
            self.must(&repo, &extra, &["update-ref", "--no-deref", "HEAD", "HEAD"])?;
        }

        let worktree_state = if wt.exists() {
            // Ours only if it is this branch's: `a/b` and `a__b` share a
            // name. Asked of the clone, not of the worktree, whose `.git`
            // file a sandbox could point at another repository.
            self.owned_by(&wt, branch)?;
            None
        } else {
            Some(self.add_worktree(&repo, &wt, &extra, branch, known.as_deref())?)
        };
        // Upstream is the host: a plain `git push` lands in its checkout
        // (each key written unless the config read above has it so).
        let merge = format!("refs/heads/{branch}");
        for (k, v) in [("remote", "host"), ("merge", merge.as_str())] {
            let key = format!("branch.{branch}.{k}");
            if cfg.and_then(|c| c.get(&key)) != Some(v) {
                self.must(&repo, &extra, &["config", &key, v])?;
            }
        }
        Ok(Provisioned {
            branch: branch.to_owned(),
            worktree: if worktree_state.is_some() {
                "created"
            } else {
                "reused"
            },
            repo: repo_state,
            path: wt,
            repo_path: repo,
            upstream: format!("host/{branch}"),
            base: worktree_state.flatten(),
            host: host_url,
        })
    }

    /// `wt` is `branch`'s worktree: `a/b` and `a__b` share a directory.
    /// Asked of the clone, not of the worktree, whose `.git` file a
    /// sandbox could point at another repository.
    fn owned_by(&self, wt: &Path, branch: &str) -> Result<(), E> {
        let there = self
            .list()?
            .into_iter()
            .find(|e| e.path == wt)
            .and_then(|e| e.branch)
            .unwrap_or_default();
        if there != branch {
            return Err(E::Collision(branch.to_owned(), there, wt.to_owned()));
        }
        Ok(())
    }

    /// Refuse a shelf repository a sandbox has armed: a config key that
    /// runs a program under a name of its choosing (git::REFUSED; the
    /// rest are overridden on every call), or git metadata that points
    /// git at another repository's config. Read as data, before any git
    /// runs in the clone. Audited, like every sbx refusal. Returns the
    /// clone's own config as read (None: no clone yet).
    pub fn check_config(&self) -> Result<Option<RepoConfig>, E> {
        let gd = self.repo().join(".git");
        let Ok(m) = std::fs::symlink_metadata(&gd) else {
            return Ok(None);
        };
        let refuse = |what: String| {
            let target = gd.to_string_lossy();
            audit::append(
                &Record::new(
                    "sbx-worktree",
                    "shelf",
                    &target,
                    Outcome::Blocked,
                    "armed-shelf",
                )
                .reason(&what),
            );
            E::Armed(gd.clone(), what)
        };
        if !m.is_dir() {
            return Err(refuse(".git is not a directory".into()));
        }
        if std::fs::symlink_metadata(gd.join("commondir")).is_ok() {
            return Err(refuse("commondir points git at another repository".into()));
        }
        let mut files = vec![gd.join("config"), gd.join("config.worktree")];
        if let Ok(rd) = std::fs::read_dir(gd.join("worktrees")) {
            for e in rd.flatten() {
                let d = e.path();
                let common = std::fs::read_to_string(d.join("commondir")).unwrap_or_default();
                if !std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir())
                    || common.trim_end_matches('\n') != "../.."
                {
                    return Err(refuse(format!(
                        "{}: not a worktree of this clone (commondir {common:?})",
                        d.display()
                    )));
                }
                files.push(d.join("config.worktree"));
            }
        }
        let mut own = RepoConfig::default();
        for (i, f) in files.iter().enumerate().filter(|(_, f)| f.exists()) {
            let fs = f.to_string_lossy().into_owned();
            let o = self.git(
                Path::new("/"),
                &[],
                &["config", "--file", &fs, "--list", "-z"],
            )?;
            if !o.ok {
                return Err(refuse(format!(
                    "{fs}: git cannot read it ({})",
                    o.stderr.trim()
                )));
            }
            let read = RepoConfig::parse(&o.stdout);
            if let Some(k) = read
                .keys()
                .find(|k| crate::git::matches(crate::git::REFUSED, k))
            {
                return Err(refuse(format!(
                    "{fs}: {k} is not allowed in a shelf (it can run a program or redirect git)"
                )));
            }
            if i == 0 {
                own = read;
            }
        }
        Ok(Some(own))
    }

    /// The administrative directory of a shelf worktree, from its `.git`
    /// file, checked to be the clone's own (a sandbox can rewrite it).
    fn worktree_gitdir(&self, wt: &Path) -> Result<PathBuf, E> {
        let f = wt.join(".git");
        let bad = || E::Armed(f.clone(), "not a link to this clone's worktrees".into());
        if !std::fs::symlink_metadata(&f).is_ok_and(|m| m.is_file()) {
            return Err(bad());
        }
        let text = std::fs::read_to_string(&f).map_err(|e| E::Io(f.clone(), e))?;
        let gd = PathBuf::from(
            text.strip_prefix("gitdir: ")
                .map(|t| t.trim_end_matches('\n'))
                .ok_or_else(bad)?,
        );
        let admin = self.repo().join(".git/worktrees");
        if gd.parent() != Some(admin.as_path()) || !gd.is_dir() {
            return Err(bad());
        }
        Ok(gd)
    }

    /// origin/* as the host last fetched it (--prune), and origin/HEAD as
    /// the host has it, else the host's current branch.
    fn origin_from(&self, repo: &Path, extra: &[&Path], host: &Path, url: &str) -> Result<(), E> {
        self.must(
            repo,
            extra,
            &[
                "fetch",
                "--quiet",
                "--prune",
                "--no-tags",
                UPLOAD_PACK,
                url,
                "+refs/remotes/origin/*:refs/remotes/origin/*",
                "^refs/remotes/origin/HEAD",
            ],
        )?;
        let hosts = [host, &host.join(".git")];
        let d = self.git(
            host,
            &hosts,
            &["symbolic-ref", "-q", "refs/remotes/origin/HEAD"],
        )?;
        let def = if d.ok && !d.stdout.trim().is_empty() {
            d.stdout.trim().to_owned()
        } else {
            let b = self.must(host, &hosts, &["symbolic-ref", "-q", "--short", "HEAD"])?;
            format!("refs/remotes/origin/{}", b.trim())
        };
        let probe = format!("{def}^{{commit}}");
        let head = "refs/remotes/origin/HEAD";
        if self
            .git(repo, extra, &["rev-parse", "-q", "--verify", &probe])?
            .ok
        {
            self.must(repo, extra, &["symbolic-ref", head, &def])?;
        } else {
            let _ = self.git(repo, extra, &["update-ref", "--no-deref", "-d", head])?;
        }
        Ok(())
    }

    fn make_dir(&self, d: &Path) -> Result<(), E> {
        if d.is_dir() {
            return Ok(());
        }
        std::fs::create_dir_all(d).map_err(|e| E::Io(d.to_owned(), e))?;
        self.hand_over(&[d])
    }

    fn clone_into(
        &self,
        repo: &Path,
        extra: &[&Path],
        source: &str,
        mirror: bool,
    ) -> Result<(), E> {
        // Aside, then renamed: no half clone is ever SHELF/repo.
        let tmp = self.dir.join(format!(".repo.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let tmp_s = tmp.to_string_lossy().into_owned();
        let mut ex = extra.to_vec();
        ex.push(&tmp);
        let args = [
            "clone",
            "--quiet",
            "--no-checkout",
            UPLOAD_PACK,
            "--",
            source,
            &tmp_s,
        ];
        let set_head = [
            "-c",
            "remote.origin.uploadpack=git-upload-pack",
            "remote",
            "set-head",
            "origin",
            "--auto",
        ];
        let r = self
            .must(&self.dir, &ex, &args)
            .and_then(|_| {
                // A clone of an empty remote has no origin/HEAD to branch
                // from; with the host's refs, origin_from sets it.
                if mirror {
                    return Ok(());
                }
                self.must(&tmp, &ex, &set_head).map(drop)
            })
            .and_then(|()| std::fs::rename(&tmp, repo).map_err(|e| E::Io(repo.to_owned(), e)));
        if r.is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        r
    }

    /// The refs under `patterns` (for-each-ref's: whole path components).
    fn refs(&self, cwd: &Path, extra: &[&Path], patterns: &[&str]) -> Result<Vec<Ref>, E> {
        let mut args = vec!["for-each-ref", REF_FORMAT];
        args.extend(patterns);
        Ok(parse_refs(&self.must(cwd, extra, &args)?))
    }

    /// `known`: the clone's config as `check_config` read it (else git is
    /// asked).
    fn set_remote(
        &self,
        repo: &Path,
        extra: &[&Path],
        name: &str,
        url: &str,
        known: Option<&RepoConfig>,
    ) -> Result<(), E> {
        let key = format!("remote.{name}.url");
        let cur = match known {
            Some(c) => c.get(&key).map(str::to_owned),
            None => {
                let o = self.git(repo, extra, &["config", "--get", &key])?;
                o.ok.then(|| o.stdout.trim_end().to_owned())
            }
        };
        match cur {
            None => drop(self.must(repo, extra, &["remote", "add", name, url])?),
            Some(c) if c != url => {
                drop(self.must(repo, extra, &["remote", "set-url", name, url])?)
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// Create the worktree; returns what a new branch started from (None
    /// when the branch already existed in the clone).
    /// `known`: the clone's refs, if read since the last change.
    fn add_worktree(
        &self,
        repo: &Path,
        wt: &Path,
        extra: &[&Path],
        branch: &str,
        known: Option<&[Ref]>,
    ) -> Result<Option<String>, E> {
        let wt_s = wt.to_string_lossy().into_owned();
        let local = format!("refs/heads/{branch}");
        let remote = format!("refs/remotes/origin/{branch}");
        let head = "refs/remotes/origin/HEAD";
        // The three refs it may start from in one call (a name git refuses
        // in a branch has no glob character; exact names are kept below).
        let refs = match known {
            Some(r) => r.to_vec(),
            None => self.refs(repo, extra, &[&local, &remote, head])?,
        };
        let found = |name: &str| refs.iter().find(|r| r.name == name);
        // A commit, or a ref that is not one at first sight: asked of git.
        let commit_of = |name: &str| -> Result<Option<String>, E> {
            match found(name) {
                None => Ok(None),
                Some(r) if r.commit.is_some() => Ok(r.commit.clone()),
                Some(_) => {
                    let want = format!("{name}^{{commit}}");
                    let o = self.git(repo, extra, &["rev-parse", "-q", "--verify", &want])?;
                    Ok(o.ok.then(|| o.stdout.trim().to_owned()))
                }
            }
        };
        self.make_dir(&self.dir.join("worktrees"))?;
        let (sha, start, base) = if let Some(sha) = commit_of(&local)? {
            (sha, None, None)
        } else if let Some(sha) = commit_of(&remote)? {
            (sha.clone(), Some(sha), Some(format!("origin/{branch}")))
        } else {
            let def = found(head)
                .map(|r| r.symref.clone())
                .filter(|d| !d.is_empty())
                .ok_or_else(|| E::NoDefault(repo.to_owned()))?;
            let sha = commit_of(head)?.ok_or_else(|| E::NoDefault(repo.to_owned()))?;
            let base = def.trim_start_matches("refs/remotes/").to_owned();
            (sha.clone(), Some(sha), Some(base))
        };
        // The checkout comes after, from a git that reads no shelf config;
        // a new branch starts at the very commit found above.
        let mut args = vec!["worktree", "add", "--quiet", "--no-checkout"];
        match &start {
            None => args.extend([wt_s.as_str(), branch]),
            Some(sha) => args.extend(["--no-track", "-b", branch, &wt_s, sha]),
        }
        let undo = || {
            // No half state: a directory git began is removed, and so is
            // its record in the clone.
            let _ = std::fs::remove_dir_all(wt);
            self.git(repo, extra, &["worktree", "prune"]).map(drop)
        };
        let first = self.git(repo, extra, &args)?;
        let mut r = if first.ok {
            Ok(first.stdout)
        } else {
            Err(git_failed(&args, &first))
        };
        if !first.ok && (first.stderr.contains("already") || first.stderr.contains("missing")) {
            // A worktree whose directory vanished still holds its branch
            // or its path (`-b` made the branch before it said so): pruned,
            // then once more, on the branch.
            undo()?;
            let again = ["worktree", "add", "--quiet", "--no-checkout", &wt_s, branch];
            r = self.must(repo, extra, &again);
        }
        let r = r.and_then(|_| self.checkout_private(repo, wt, &sha));
        if let Err(e) = r {
            let _ = undo();
            return Err(e);
        }
        Ok(base)
    }

    /// Fill a new worktree from its branch's commit with a git that reads
    /// none of the shelf's own files but its objects and the worktree's
    /// index (`private`), so no filter or other program the shelf's config
    /// names can run, whatever a sandbox writes there after `check_config`
    /// read it.
    fn checkout_private(&self, repo: &Path, wt: &Path, sha: &str) -> Result<(), E> {
        // Writing the files is most of a new worktree's time, much of it
        // waiting on the file system: parallel checkout (workers are the
        // same private git) overlaps those waits.
        let workers = format!("checkout.workers={}", checkout_workers());
        let args = ["-c", &workers, "read-tree", "--reset", "-u", sha];
        let o = self.private(repo, wt, sha, &args)?;
        if !o.ok {
            return Err(git_failed(&args, &o));
        }
        Ok(())
    }

    /// Run git on worktree `wt` as a repository of nothing but the clone's
    /// objects, the worktree's index and HEAD at `sha`: a private GIT_DIR
    /// (empty config, no info/attributes, no hooks, no refs), so the only
    /// shelf files git reads are data (objects, index, the worktree's
    /// files) and no config a sandbox wrote can name a program.
    fn private(&self, repo: &Path, wt: &Path, sha: &str, args: &[&str]) -> Result<Out, E> {
        if !is_object_name(sha) {
            return Err(E::Git(
                args.first().copied().unwrap_or("git").to_owned(),
                format!("not an object name: {sha:?}"),
            ));
        }
        let admin = self.worktree_gitdir(wt)?;
        let tmp = tempfile::Builder::new()
            .prefix("sbx-worktree-git.")
            .tempdir()
            .map_err(|e| E::Io(std::env::temp_dir(), e))?;
        let gd = tmp.path();
        let io = |p: &Path, e| E::Io(p.to_owned(), e);
        std::fs::create_dir(gd.join("refs")).map_err(|e| io(gd, e))?;
        std::fs::write(gd.join("HEAD"), format!("{sha}\n")).map_err(|e| io(gd, e))?;
        std::fs::write(gd.join("config"), "").map_err(|e| io(gd, e))?;
        // Git runs as the owner: it reads this directory, writes nothing in it.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(gd, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| io(gd, e))?;
        }
        let objects = repo.join(".git/objects");
        let index = admin.join("index");
        let env: [(&str, &OsStr); 4] = [
            ("GIT_DIR", gd.as_os_str()),
            ("GIT_OBJECT_DIRECTORY", objects.as_os_str()),
            ("GIT_INDEX_FILE", index.as_os_str()),
            ("GIT_WORK_TREE", wt.as_os_str()),
        ];
        let argv: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        self.git.run_env(wt, &[], &env, &argv)
    }

    /// Whether `wt` (HEAD at `head`) has nothing `remove` would lose:
    /// no change against HEAD, no untracked file, no submodule (whose
    /// status would be a git run in a repository a sandbox made). Asked
    /// through `private`: a status through the shelf's config could run
    /// a clean filter it names on every changed file.
    fn is_clean(&self, wt: &Path, head: &str) -> Result<bool, E> {
        let repo = self.repo();
        let run = |args: &[&str]| -> Result<String, E> {
            let o = self.private(&repo, wt, head, args)?;
            if o.ok {
                Ok(o.stdout)
            } else {
                Err(git_failed(args, &o))
            }
        };
        let st = run(&[
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--ignore-submodules=all",
        ])?;
        let staged = run(&["ls-files", "--stage", "-z"])?;
        let gitlink = staged.split('\0').any(|l| l.starts_with("160000 "));
        Ok(st.trim().is_empty() && !gitlink)
    }

    /// As root for another user: give them what was made (lchown, no
    /// symlink is followed). Skipped when the caller is that user already.
    fn hand_over(&self, roots: &[&Path]) -> Result<(), E> {
        if caller() == self.owner || caller().0 != 0 {
            return Ok(());
        }
        let (u, g) = self.owner;
        for root in roots {
            chown_tree(root, u, g)?;
        }
        Ok(())
    }

    pub fn list(&self) -> Result<Vec<Entry>, E> {
        let repo = self.repo();
        if !repo.join(".git").exists() {
            return Ok(Vec::new());
        }
        let text = self.must(&repo, &[], &["worktree", "list", "--porcelain"])?;
        let wts = self.dir.join("worktrees");
        Ok(parse_porcelain(&text)
            .into_iter()
            .filter(|e| e.path.starts_with(&wts))
            .collect())
    }

    pub fn remove(&self, branch: &str, force: bool, wait: Duration) -> Result<PathBuf, E> {
        self.check_owner()?;
        let _lock = lock::acquire(&self.dir.join(".lock"), wait)?;
        let wt = self.worktree(branch);
        let found = self.list()?;
        let Some(e) = found.iter().find(|e| e.path == wt) else {
            return Err(E::NoWorktree(branch.to_owned()));
        };
        if e.branch.as_deref() != Some(branch) {
            return Err(E::Collision(
                branch.to_owned(),
                e.branch.clone().unwrap_or_default(),
                wt,
            ));
        }
        let repo = self.repo();
        self.check_config()?;
        if !force && wt.is_dir() && !self.is_clean(&wt, &e.head)? {
            return Err(E::Dirty(wt));
        }
        // Always --force: git's own check is a status through the shelf's
        // config (see is_clean), and ours has run. A locked worktree is
        // still refused (that takes --force twice).
        let wt_s = wt.to_string_lossy().into_owned();
        self.must(&repo, &[&wt], &["worktree", "remove", "--force", &wt_s])?;
        Ok(wt)
    }

    pub fn prune(&self, wait: Duration) -> Result<Vec<(String, PathBuf)>, E> {
        self.check_owner()?;
        let _lock = lock::acquire(&self.dir.join(".lock"), wait)?;
        self.check_config()?;
        let gone: Vec<(String, PathBuf)> = self
            .list()?
            .into_iter()
            .filter(|e| e.prunable || !e.path.exists())
            .map(|e| (e.branch.unwrap_or_default(), e.path))
            .collect();
        if !gone.is_empty() {
            self.must(&self.repo(), &[], &["worktree", "prune"])?;
        }
        Ok(gone)
    }
}

/// The host checkout's one call when all is well: its top level, HEAD's
/// branch, and a commit there (`--`: a file named HEAD is no matter).
const HOST_CHECK: &[&str] = &[
    "rev-parse",
    "--show-toplevel",
    "--symbolic-full-name",
    "HEAD",
    "HEAD^{commit}",
    "--",
];

fn check_ref_format(branch: &str) -> [&str; 3] {
    ["check-ref-format", "--branch", branch]
}

/// `@{-1}` and the like expand: only a name that is itself is taken.
fn judge_branch(branch: &str, o: &Out) -> Result<(), E> {
    if !o.ok || o.stdout.trim_end_matches('\n') != branch || branch.starts_with('-') {
        return Err(E::BadBranch(branch.to_owned()));
    }
    Ok(())
}

/// A shelf clone's config as `git config --list -z` printed it: (key,
/// value) in file order, a key without `=` having no value.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RepoConfig(Vec<(String, Option<String>)>);

impl RepoConfig {
    /// Entries are `key\nvalue\0` or `key\0` (a key has no newline).
    pub fn parse(z: &str) -> Self {
        Self(
            z.split('\0')
                .filter(|e| !e.is_empty())
                .map(|e| match e.split_once('\n') {
                    Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
                    None => (e.to_owned(), None),
                })
                .collect(),
        )
    }

    /// Every value of `key`, in order.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_deref().unwrap_or(""))
            .collect()
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_str())
    }

    /// The last value, as `git config --get` answers (the section and
    /// the variable of `key` lower-case, as git prints them).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// for-each-ref's fields, NUL-separated (no refname holds one).
const REF_FORMAT: &str = "--format=%(refname)%00%(objecttype)%00%(objectname)%00%(*objecttype)%00%(*objectname)%00%(symref)";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ref {
    name: String,
    object: String,
    /// The commit it names, itself or through one tag.
    commit: Option<String>,
    symref: String,
}

fn parse_refs(text: &str) -> Vec<Ref> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\0').collect();
            let [name, ty, obj, pty, pobj, symref] = f[..] else {
                return None;
            };
            let commit = match (ty, pty) {
                ("commit", _) => Some(obj),
                (_, "commit") => Some(pobj),
                _ => None,
            }
            .filter(|o| is_object_name(o))
            .map(str::to_owned);
            Some(Ref {
                name: name.to_owned(),
                object: obj.to_owned(),
                commit,
                symref: symref.to_owned(),
            })
        })
        .collect()
}

/// Whether a fetch from the host would change nothing in the clone:
/// origin's branches are the host's (`theirs`: its branches, or with
/// `mirror` its origin's, whose HEAD must be the clone's too), and, with
/// the refspec a clone writes, every tag of the host is here as it is
/// there (a fetch brings no other; it never removes one).
fn in_step(mirror: bool, theirs: &[Ref], ours: &[Ref], cfg: Option<&RepoConfig>) -> bool {
    use std::collections::BTreeSet;
    const ORIGIN: &str = "refs/remotes/origin/";
    const HEAD: &str = "refs/remotes/origin/HEAD";
    let from = if mirror { ORIGIN } else { "refs/heads/" };
    let a: BTreeSet<(String, &str)> = theirs
        .iter()
        .filter(|r| r.name != HEAD)
        .filter_map(|r| {
            let n = r.name.strip_prefix(from)?;
            Some((format!("{ORIGIN}{n}"), r.object.as_str()))
        })
        .collect();
    let b: BTreeSet<(String, &str)> = ours
        .iter()
        .filter(|r| r.name.starts_with(ORIGIN) && r.name != HEAD)
        .map(|r| (r.name.clone(), r.object.as_str()))
        .collect();
    if a != b {
        return false;
    }
    if mirror {
        let head = |v: &[Ref]| {
            v.iter()
                .find(|r| r.name == HEAD)
                .map(|r| r.symref.clone())
                .filter(|s| !s.is_empty())
        };
        return head(theirs).is_some() && head(theirs) == head(ours);
    }
    let spec: Vec<&str> = cfg
        .map(|c| c.all("remote.origin.fetch"))
        .unwrap_or_default();
    spec == ["+refs/heads/*:refs/remotes/origin/*"]
        && theirs
            .iter()
            .filter(|t| t.name.starts_with("refs/tags/"))
            .all(|t| {
                ours.iter()
                    .any(|o| o.name == t.name && o.object == t.object)
            })
}

fn is_object_name(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether the clone's HEAD file names an object (a detached HEAD). A
/// regular file of a few bytes only: the shelf is every sandbox's to
/// write (a FIFO would hang the read); anything else is asked of git.
fn head_file_detached(repo: &Path) -> bool {
    let f = repo.join(".git/HEAD");
    if !std::fs::symlink_metadata(&f).is_ok_and(|m| m.is_file() && m.len() <= 80) {
        return false;
    }
    std::fs::read_to_string(&f).is_ok_and(|t| is_object_name(t.trim_end_matches('\n')))
}

/// Two per core (file creation waits on the journal as much as it
/// computes), at most 8.
fn checkout_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get() * 2)
        .unwrap_or(2)
        .clamp(2, 8)
}

fn git_failed(args: &[&str], o: &Out) -> E {
    let msg = o
        .stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .trim()
        .to_owned();
    let mut rest = args;
    while let ["-c", _, tail @ ..] = rest {
        rest = tail;
    }
    let cmd = rest.iter().take(3).copied().collect::<Vec<_>>().join(" ");
    E::Git(cmd, msg)
}

fn chown_tree(root: &Path, uid: u32, gid: u32) -> Result<(), E> {
    let io = |p: &Path, e| E::Io(p.to_owned(), e);
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        std::os::unix::fs::lchown(&p, Some(uid), Some(gid)).map_err(|e| io(&p, e))?;
        let m = std::fs::symlink_metadata(&p).map_err(|e| io(&p, e))?;
        if m.is_dir() {
            for e in std::fs::read_dir(&p).map_err(|e| io(&p, e))? {
                stack.push(e.map_err(|e| io(&p, e))?.path());
            }
        }
    }
    Ok(())
}

/// `git worktree list --porcelain`: blank-line separated records.
pub fn parse_porcelain(text: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    for rec in text.split("\n\n") {
        let mut e = Entry {
            branch: None,
            path: PathBuf::new(),
            head: String::new(),
            prunable: false,
        };
        for line in rec.lines() {
            let (k, v) = line.split_once(' ').unwrap_or((line, ""));
            match k {
                "worktree" => e.path = PathBuf::from(v),
                "HEAD" => e.head = v.to_owned(),
                "branch" => e.branch = Some(v.trim_start_matches("refs/heads/").to_owned()),
                "prunable" => e.prunable = true,
                _ => {}
            }
        }
        if !e.path.as_os_str().is_empty() {
            out.push(e);
        }
    }
    out
}

pub fn print_provisioned(
    out: &mut impl Write,
    common: &CommonArgs,
    p: &Provisioned,
) -> std::io::Result<()> {
    if common.json {
        output::json_line(out, "provisioned", p)
    } else if !common.quiet {
        writeln!(
            out,
            "{} {} ({}; pushes to {})",
            p.worktree,
            p.path.display(),
            p.branch,
            p.upstream
        )
    } else {
        Ok(())
    }
}

pub fn print_list(
    out: &mut impl Write,
    common: &CommonArgs,
    list: &[Entry],
) -> std::io::Result<()> {
    for e in list {
        if common.json {
            output::json_line(out, "worktree", e)?;
        } else if !common.quiet {
            writeln!(
                out,
                "{}\t{}\t{}{}",
                e.branch.as_deref().unwrap_or("(detached)"),
                e.path.display(),
                e.head.get(..12).unwrap_or(&e.head),
                if e.prunable { "\tprunable" } else { "" }
            )?;
        }
    }
    Ok(())
}

pub fn print_event(
    out: &mut impl Write,
    common: &CommonArgs,
    what: &str,
    branch: &str,
    dir: &Path,
) -> std::io::Result<()> {
    if common.json {
        output::json_line(out, what, &json!({"branch": branch, "path": dir}))
    } else if !common.quiet {
        writeln!(out, "{what} {} ({branch})", dir.display())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::fake::FakeGit;

    fn ok(stdout: &str) -> Out {
        Out {
            ok: true,
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    fn fail(stderr: &str) -> Out {
        Out {
            ok: false,
            stdout: String::new(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn sanitizing_matches_sbx_run() {
        assert_eq!(sanitize_branch("a/b c\td"), "a__b__c__d");
        assert_eq!(
            sanitize_branch("feature/login page"),
            "feature__login__page"
        );
    }

    #[test]
    fn porcelain() {
        let t = "worktree /s/repo\nHEAD abc\nbare\n\nworktree /s/worktrees/a__b\nHEAD def\nbranch refs/heads/a/b\n\nworktree /s/worktrees/x\nHEAD 123\ndetached\nprunable gitdir file points to non-existent location\n";
        let v = parse_porcelain(t);
        assert_eq!(v.len(), 3);
        assert_eq!(v[1].branch.as_deref(), Some("a/b"));
        assert!(v[2].prunable && v[2].branch.is_none());
    }

    /// A refused name stops everything: no clone, no directory.
    #[test]
    fn bad_branch_changes_nothing() {
        let t = tempfile::tempdir().unwrap();
        let shelf = t.path().join("shelf");
        let git = FakeGit {
            script: vec![("check-ref-format".into(), fail("fatal: bad"))],
            ..FakeGit::default()
        };
        let s = Shelf::new(&git, &shelf, caller());
        let r = s.provision(t.path(), "bad..name", Duration::from_secs(1));
        assert!(matches!(r, Err(E::BadBranch(_))), "{r:?}");
        assert!(!shelf.exists());
        // Only the questions asked at once with the name's (read-only).
        let calls = git.calls.borrow();
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert!(calls[0].starts_with("check-ref-format"), "{calls:?}");
        assert!(
            calls[1].starts_with("rev-parse --show-toplevel"),
            "{calls:?}"
        );
        assert!(calls[2].starts_with("remote get-url"), "{calls:?}");
    }

    /// `@{-1}` expands to another name: refused though git says ok.
    #[test]
    fn expanding_names_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let git = FakeGit {
            script: vec![(
                "check-ref-format".into(),
                Out {
                    ok: true,
                    stdout: "main\n".into(),
                    stderr: String::new(),
                },
            )],
            ..FakeGit::default()
        };
        let s = Shelf::new(&git, &t.path().join("s"), caller());
        let r = s.provision(t.path(), "@{-1}", Duration::from_secs(1));
        assert!(matches!(r, Err(E::BadBranch(_))), "{r:?}");
    }

    /// A failing `worktree add` leaves no directory and prunes git's record.
    #[test]
    fn failed_worktree_add_is_undone() {
        let t = tempfile::tempdir().unwrap();
        let shelf = t.path().join("shelf");
        std::fs::create_dir_all(shelf.join("repo/.git")).unwrap();
        let host = t.path().join("host");
        std::fs::create_dir_all(&host).unwrap();
        let host_c = host.canonicalize().unwrap();
        let git = FakeGit {
            script: vec![
                ("check-ref-format".into(), ok("b\n")),
                (
                    "rev-parse --show-toplevel".into(),
                    ok(&format!("{}\n", host_c.display())),
                ),
                ("remote get-url".into(), fail("")),
                (
                    "for-each-ref".into(),
                    ok(&format!(
                        "refs/remotes/origin/HEAD\0commit\0{}\0\0\0refs/remotes/origin/main\n",
                        "a".repeat(40)
                    )),
                ),
                ("worktree add".into(), fail("fatal: disk full")),
            ],
            ..FakeGit::default()
        };
        let s = Shelf::new(&git, &shelf, caller());
        let r = s.provision(&host, "b", Duration::from_secs(1));
        assert!(
            matches!(&r, Err(E::Git(c, m)) if c == "worktree add --quiet" && m == "fatal: disk full"),
            "{r:?}"
        );
        assert!(!shelf.join("worktrees/b").exists());
        let calls = git.calls.borrow();
        assert_eq!(calls.last().map(String::as_str), Some("worktree prune"));
        // Started at the default branch's commit; not tried again (the
        // failure was not a stale worktree's).
        let adds: Vec<_> = calls
            .iter()
            .filter(|c| c.starts_with("worktree add"))
            .collect();
        assert_eq!(adds.len(), 1, "{calls:?}");
        assert!(
            adds[0].ends_with(&format!(
                "-b b {} {}",
                shelf.join("worktrees/b").display(),
                "a".repeat(40)
            )),
            "{calls:?}"
        );
        // The upstream was never set on a branch that was not made.
        assert!(!calls.iter().any(|c| c.starts_with("config branch.")));
    }

    /// Attack: `remove`'s clean check must not run what the shelf's config
    /// names, even a config armed after `check_config` read it (here armed
    /// before the check itself is called): a clean filter on every file
    /// and a file whose stat changed, so a status through that config
    /// would run the filter to hash it.
    #[test]
    fn clean_check_reads_no_shelf_config() {
        use crate::git::RealGit;
        let t = tempfile::tempdir().unwrap();
        let host = t.path().join("host");
        let sh = |cwd: &Path, args: &[&str]| {
            let o = std::process::Command::new("git")
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "init.defaultBranch=main",
                ])
                .arg("-C")
                .arg(cwd)
                .args(args)
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        std::fs::create_dir_all(&host).unwrap();
        sh(&host, &["init", "-q"]);
        std::fs::write(host.join("f"), "hello\n").unwrap();
        std::fs::write(host.join(".gitattributes"), "* filter=x\n").unwrap();
        sh(&host, &["add", "."]);
        sh(&host, &["commit", "-qm", "one"]);
        let git = RealGit::new(caller()).unwrap();
        let shelf = t.path().join("shelf");
        let s = Shelf::new(&git, &shelf, caller());
        let p = s.provision(&host, "b", Duration::from_secs(5)).unwrap();
        let head = s.list().unwrap().remove(0).head;
        assert!(s.is_clean(&p.path, &head).unwrap());

        let mark = t.path().join("ran");
        let script = t.path().join("evil");
        std::fs::write(
            &script,
            format!("#!/bin/sh\ntouch {}\ncat\n", mark.display()),
        )
        .unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let cfg = shelf.join("repo/.git/config");
        let mut text = std::fs::read_to_string(&cfg).unwrap();
        text.push_str(&format!(
            "[filter \"x\"]\n\tclean = {0}\n\tprocess = {0}\n[core]\n\tfsmonitor = {0}\n",
            script.display()
        ));
        std::fs::write(&cfg, text).unwrap();
        // Same size, new mtime: git must hash the file to know it is unchanged.
        std::thread::sleep(Duration::from_millis(1100));
        std::fs::write(p.path.join("f"), "hello\n").unwrap();

        assert!(s.is_clean(&p.path, &head).unwrap());
        assert!(!mark.exists(), "the shelf's clean filter ran");
        std::fs::write(p.path.join("f"), "jello\n").unwrap();
        assert!(!s.is_clean(&p.path, &head).unwrap());
        std::fs::write(p.path.join("f"), "hello\n").unwrap();
        std::fs::write(p.path.join("new"), "u").unwrap();
        assert!(!s.is_clean(&p.path, &head).unwrap());
        assert!(!mark.exists(), "the shelf's clean filter ran");
    }

    /// Records each call of a real git.
    struct Counting<'a>(&'a dyn Git, std::cell::RefCell<Vec<String>>);

    impl Git for Counting<'_> {
        fn run_env(
            &self,
            cwd: &Path,
            safe: &[PathBuf],
            env: &[(&str, &OsStr)],
            args: &[&OsStr],
        ) -> Result<Out, E> {
            let line: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
            self.1.borrow_mut().push(line.join(" "));
            self.0.run_env(cwd, safe, env, args)
        }
    }

    /// A new worktree on a cloned shelf whose refs are the host's takes
    /// ten git calls and no fetch (it took 19 calls, the fetch four
    /// processes), and one that is there writes nothing: no remote, no
    /// upstream, no worktree, no HEAD (all already so). A branch or a tag
    /// new on the host is fetched.
    #[test]
    fn a_new_worktree_takes_ten_git_calls() {
        use crate::git::RealGit;
        let t = tempfile::tempdir().unwrap();
        let host = t.path().join("host");
        std::fs::create_dir_all(&host).unwrap();
        let sh = |args: &[&str]| {
            let o = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
                .arg(&host)
                .args(args)
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        };
        sh(&["init", "-q", "-b", "main"]);
        sh(&["commit", "-q", "--allow-empty", "-m", "one"]);
        let real = RealGit::new(caller()).unwrap();
        let shelf = t.path().join("shelf");
        let wait = Duration::from_secs(5);
        Shelf::new(&real, &shelf, caller())
            .provision(&host, "seed", wait)
            .unwrap();
        let git = Counting(&real, Default::default());
        let s = Shelf::new(&git, &shelf, caller());
        let p = s.provision(&host, "b", wait).unwrap();
        assert_eq!(
            (p.worktree, p.base.as_deref()),
            ("created", Some("origin/main"))
        );
        let calls = git.1.take();
        assert_eq!(calls.len(), 10, "{calls:#?}");
        assert!(!calls.iter().any(|c| c.starts_with("fetch")), "{calls:#?}");
        let p = s.provision(&host, "b", wait).unwrap();
        assert_eq!(p.worktree, "reused");
        let calls = git.1.take();
        let writes = [
            "fetch",
            "config branch.",
            "remote add",
            "remote set-url",
            "worktree add",
            "update-ref",
            "worktree prune",
        ];
        assert!(
            !calls
                .iter()
                .any(|c| writes.iter().any(|w| c.starts_with(w))),
            "{calls:#?}"
        );
        assert_eq!(calls.len(), 7, "{calls:#?}");

        // New on the host: a branch, then a tag; each is fetched.
        sh(&["branch", "f2"]);
        let p = s.provision(&host, "f2", wait).unwrap();
        assert_eq!(p.base.as_deref(), Some("origin/f2"));
        assert!(git.1.take().iter().any(|c| c.starts_with("fetch")));
        sh(&["tag", "v1"]);
        s.provision(&host, "f3", wait).unwrap();
        assert!(git.1.take().iter().any(|c| c.starts_with("fetch")));
        let o = real
            .run(
                &shelf.join("repo"),
                &[shelf.join("repo")],
                &[OsStr::new("tag")],
            )
            .unwrap();
        assert_eq!(o.stdout, "v1\n");
        // A branch gone from the host: fetched (pruned).
        sh(&["branch", "-D", "f2"]);
        s.provision(&host, "f4", wait).unwrap();
        assert!(git.1.take().iter().any(|c| c.starts_with("fetch")));
    }

    /// A clone that fails leaves no SHELF/repo behind.
    #[test]
    fn failed_clone_leaves_no_repo() {
        let t = tempfile::tempdir().unwrap();
        let shelf = t.path().join("shelf");
        let host = t.path().join("host");
        std::fs::create_dir_all(&host).unwrap();
        let host_c = host.canonicalize().unwrap();
        let git = FakeGit {
            script: vec![
                ("check-ref-format".into(), ok("b\n")),
                (
                    "rev-parse --show-toplevel".into(),
                    ok(&format!("{}\n", host_c.display())),
                ),
                ("remote get-url".into(), fail("")),
                (
                    "-c remote.origin.uploadpack=git-upload-pack remote set-head".into(),
                    fail("fatal: no HEAD"),
                ),
            ],
            ..FakeGit::default()
        };
        let s = Shelf::new(&git, &shelf, caller());
        let r = s.provision(&host, "b", Duration::from_secs(1));
        assert!(matches!(r, Err(E::Git(..))), "{r:?}");
        assert!(!shelf.join("repo").exists());
        let left: Vec<_> = std::fs::read_dir(&shelf)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != ".lock")
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
