//! `build-base`: the bootstrap FROM image (mmdebstrap) for hosts without a registry
//! and the shared base image. Every build tags only when it completes, so
//! an interrupted build leaves no half-tagged image.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args;
use md5::{Digest, Md5};
use sbx_core::cli::CommonArgs;
use sbx_core::output;

use crate::{BASE_IMAGE, RunError, docker};

pub const DOCKERFILE: &str = include_str!("../../../base-image/Dockerfile");
pub const GUEST_TOML: &str = include_str!("../../../base-image/guest.toml");
pub const BASHRC: &str = include_str!("../../../base-image/bashrc");
/// The sbx binaries copied into the base image when they are built.
pub const TOOLS: &[&str] = &[
    "sbx-envfilter",
    "sbx-git-guard",
    "sbx-git-client",
    "sbx-fw",
    "sbx-guest",
    "sbx-backup",
    "sbx-worktree",
    "sbx-tool-guard",
];

/// Tools an image cannot do without: its init, its firewall, its git guard
/// and the client that is the sandbox's `git`, and the [tools] checker (a
/// hook that is missing lets every call through).
pub const REQUIRED: &[&str] = &[
    "sbx-guest",
    "sbx-fw",
    "sbx-git-guard",
    "sbx-git-client",
    "sbx-tool-guard",
];

const SUITE: &str = "bookworm";
/// What the Dockerfile's AI-CLI step prints before it fails.
const NPM_UNREACHABLE: &str = "the npm registry could not be reached: no AI CLIs installed";
/// What the Dockerfile's AI-CLI step prints when npm fails; computed there
/// (`$((70 + 5))`), so the log's echo of the step's own text never matches.
const NPM_UNREACHABLE_MARK: &str = "sbx-npm-unreachable: 75";
/// What the bootstrap image holds; its hash is part of the tag.
const BOOTSTRAP_RECIPE: &str = "mmdebstrap --variant=minbase --include=ca-certificates v1";
/// npm in the image is its own release, not Debian's package (which brings
/// about 350 node-* packages: 18 s of a fresh image's 35 s package step).
/// Pinned by hash, fetched by the host's npm; bookworm's Node 18 runs npm
/// 10, not 11.
const NPM_VERSION: &str = "10.9.9";
const NPM_SHA512: &str = "d60fba8cb42f688b81e33c2f1cbef2ad7b977166700ec0ad057f1b6d60ea6ef2524abf673e20c35931cd8305d1dbb8887134d6eefdc0e7b8435bd458bf65b862";

/// The base tag used when none is named: `$SBX_BASE_TAG`, else latest.
/// Lets parallel checkouts (and their test suites) keep separate bases.
pub fn default_base_tag() -> String {
    std::env::var("SBX_BASE_TAG")
        .ok()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "latest".into())
}

#[derive(Debug, Clone, Args)]
pub struct BaseOpts {
    /// Tag of the base image.
    #[arg(
        long,
        value_name = "TAG",
        env = "SBX_BASE_TAG",
        default_value = "latest"
    )]
    pub tag: String,
    /// Claude Code version from npm ("latest" is resolved before the build).
    #[arg(long, value_name = "V", default_value = "latest")]
    pub claude_code_version: String,
    /// Codex version from npm.
    #[arg(long, value_name = "V", default_value = "latest")]
    pub codex_version: String,
    /// ast-grep version from npm.
    #[arg(long, value_name = "V", default_value = "latest")]
    pub ast_grep_version: String,
    /// Build FROM a Debian root made with mmdebstrap from the host's apt mirror (no registry needed).
    #[arg(long)]
    pub bootstrap: bool,
    /// Add this CA bundle to the image (TLS-intercepting networks).
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Skip the npm AI CLIs (Claude Code, Codex, ast-grep).
    #[arg(long)]
    pub no_ai_clis: bool,
    /// Build only the layers that do not hold the sbx tools (Debian packages,
    /// AI CLIs), so they are cached while the tools still compile; the next
    /// build-base with the same options reuses them. Needs no sbx binaries.
    #[arg(long)]
    pub prefetch: bool,
    /// git-delta version to put in the image as /usr/local/bin/delta, or "none".
    /// Debian bookworm has no git-delta package, so it is built from its crate
    /// with the host's cargo (minutes, once per version: cached in ~/.cache/sbx).
    #[arg(long, value_name = "V", default_value = "none", value_parser = parse_delta_version)]
    pub git_delta_version: String,
}

/// "none" or a version number: it becomes an argument of `cargo install`.
fn parse_delta_version(v: &str) -> Result<String, String> {
    let ok = v == "none"
        || (v.starts_with(|c: char| c.is_ascii_digit())
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')));
    if ok {
        Ok(v.to_owned())
    } else {
        Err(format!(
            "\"{v}\" is not a version: give one like 0.18.2, or \"none\""
        ))
    }
}

/// `delta` of git-delta `version`, built once with the host's cargo into
/// ~/.cache/sbx/git-delta-<version> (a finished build is renamed in, so an
/// interrupted one is not mistaken for a cached binary).
fn ensure_delta(version: &str) -> Result<PathBuf, RunError> {
    let cache = cache_dir();
    let root = cache.join(format!("git-delta-{version}"));
    let bin = root.join("bin/delta");
    if bin.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&cache).map_err(|e| RunError::Io(cache.clone(), e))?;
    let tmp = tempfile::Builder::new()
        .prefix(".git-delta-")
        .tempdir_in(&cache)
        .map_err(|e| RunError::Io(cache.clone(), e))?;
    output::progress(&format!("building git-delta {version} with cargo (once)…"));
    let mut cmd = Command::new("cargo");
    cmd.args([
        "install",
        "--locked",
        "--quiet",
        "git-delta",
        "--version",
        version,
        "--root",
    ])
    .arg(tmp.path())
    .stdin(Stdio::null());
    match cmd.status() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(RunError::Build(
                "--git-delta-version needs cargo on the host (rustup), or use --git-delta-version none".into(),
            ));
        }
        r => check_status(r, &format!("cargo install git-delta {version}"))?,
    }
    std::fs::rename(tmp.path(), &root).map_err(|e| RunError::Io(root.clone(), e))?;
    Ok(bin)
}

/// ~/.cache/sbx (or $XDG_CACHE_HOME/sbx): what build-base fetches or builds once.
fn cache_dir() -> PathBuf {
    cache_dir_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
}

/// A relative `XDG_CACHE_HOME` is ignored, as the XDG spec says: it would
/// put the cache in the directory build-base runs in, a repository the
/// agent writes.
fn cache_dir_from(xdg: Option<std::ffi::OsString>, home: Option<std::ffi::OsString>) -> PathBuf {
    xdg.map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
        .join("sbx")
}

/// npm's release tarball for the image, written to `dest` in the build
/// context: fetched once by the host's npm (its registry, credentials and
/// CA) into `cache` ([`cache_dir`] for build-base), and used only when the
/// copy in `dest` matches [`NPM_SHA512`]. Err says why there is none (and
/// `dest` is absent).
pub fn npm_release(cache: &Path, dest: &Path) -> Result<(), String> {
    let tgz = cache.join(format!("npm-{NPM_VERSION}.tgz"));
    if copy_checked(&tgz, dest, NPM_SHA512) {
        return Ok(());
    }
    // An unwritable cache costs the cache, not npm: fetch into a temp dir.
    let tmp = std::fs::create_dir_all(cache)
        .and_then(|()| tempfile::Builder::new().prefix(".npm-").tempdir_in(cache))
        .or_else(|_| tempfile::Builder::new().prefix("sbx-npm-").tempdir())
        .map_err(|e| format!("a temporary directory: {e}"))?;
    output::progress(&format!(
        "fetching npm {NPM_VERSION} with the host's npm (once)…"
    ));
    let out = npm_cmd()
        .args(["pack", "--silent", &format!("npm@{NPM_VERSION}")])
        .arg("--pack-destination")
        .arg(tmp.path())
        .output();
    match out {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("the host has no npm (scripts/prereqs installs it)".into());
        }
        Err(e) => return Err(format!("npm: {e}")),
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
            return Err(format!(
                "npm pack npm@{NPM_VERSION} failed: {}",
                last.trim()
            ));
        }
        Ok(_) => {}
    }
    let got = tmp.path().join(format!("npm-{NPM_VERSION}.tgz"));
    if !copy_checked(&got, dest, NPM_SHA512) {
        return Err(format!(
            "npm {NPM_VERSION} from the registry does not match the sha512 sbx pins: not used"
        ));
    }
    if let Err(e) = std::fs::rename(&got, &tgz) {
        output::warn(&format!(
            "{}: {e}: npm {NPM_VERSION} is not cached, build-base fetches it again",
            tgz.display()
        ));
    }
    Ok(())
}

/// Copies `from` to `to` and keeps the copy only when its SHA-512 is `hex`.
/// The check reads the copy the image gets, not `from`: a cache file
/// changed between a check and a copy cannot reach the image.
fn copy_checked(from: &Path, to: &Path, hex: &str) -> bool {
    let _ = std::fs::remove_file(to);
    if from.is_file() && std::fs::copy(from, to).is_ok() && sha512_matches(to, hex) {
        return true;
    }
    let _ = std::fs::remove_file(to);
    false
}

/// Whether `path`'s SHA-512 (coreutils' sha512sum) is `hex`.
fn sha512_matches(path: &Path, hex: &str) -> bool {
    path.is_file()
        && Command::new("sha512sum")
            .arg("--")
            .arg(path)
            .stdin(Stdio::null())
            .output()
            .is_ok_and(|o| {
                o.status.success() && o.stdout.split(|b| *b == b' ').next() == Some(hex.as_bytes())
            })
}

impl Default for BaseOpts {
    fn default() -> Self {
        Self {
            tag: default_base_tag(),
            claude_code_version: "latest".into(),
            codex_version: "latest".into(),
            ast_grep_version: "latest".into(),
            bootstrap: false,
            ca_cert: None,
            no_ai_clis: false,
            prefetch: false,
            git_delta_version: "none".into(),
        }
    }
}

/// Where a build's own output goes: a named log under the state directory.
pub fn build_log(image: &str) -> PathBuf {
    let name: String = image
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    crate::state_dir().join(format!("build-{name}.log"))
}

/// Point a build's stdout and stderr at its log (with -v: the terminal),
/// so a first run stays quiet; on failure the log's tail is shown.
pub fn log_to(cmd: &mut Command, image: &str) -> Result<Option<PathBuf>, RunError> {
    if output::is_verbose() {
        return Ok(None);
    }
    let log = build_log(image);
    if let Some(d) = log.parent() {
        std::fs::create_dir_all(d).map_err(|e| RunError::Io(d.to_owned(), e))?;
    }
    let f = std::fs::File::create(&log).map_err(|e| RunError::Io(log.clone(), e))?;
    let f2 = f.try_clone().map_err(|e| RunError::Io(log.clone(), e))?;
    cmd.stdout(f).stderr(f2);
    Ok(Some(log))
}

/// A failed build's error: its last lines and the log's name.
pub fn with_tail(e: RunError, log: Option<&Path>) -> RunError {
    let (RunError::Build(msg), Some(log)) = (&e, log) else {
        return e;
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(15)..].join("\n  ");
    RunError::Build(format!("{msg}; the end of {}:\n  {tail}", log.display()))
}

fn run_checked(cmd: &mut Command, what: &str) -> Result<(), RunError> {
    check_status(cmd.status(), what)
}

/// The end of every build step: Ctrl-C first (the child saw it too), then
/// the child's own status.
pub fn check_status(
    status: std::io::Result<std::process::ExitStatus>,
    what: &str,
) -> Result<(), RunError> {
    let status = status.map_err(|e| RunError::Build(format!("{what}: {e}")))?;
    if crate::interrupted() {
        return Err(RunError::Interrupted);
    }
    if !status.success() {
        return Err(RunError::Build(format!("{what} failed ({status})")));
    }
    Ok(())
}

pub fn bootstrap_tag() -> String {
    let h = Md5::digest(format!("{SUITE} {BOOTSTRAP_RECIPE}"));
    let hex: String = h.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("agent-sandbox-bootstrap:{SUITE}-{hex}")
}

/// The bootstrap FROM image, built when missing: mmdebstrap's tar straight
/// into `docker import` (half of debootstrap's time, and no root on disk).
pub fn ensure_bootstrap() -> Result<String, RunError> {
    let tag = bootstrap_tag();
    if docker::exists("image", &tag)? {
        return Ok(tag);
    }
    let sources = sbx_core::apt::read_sources(Path::new("/"));
    let mirror = sbx_core::apt::mirror_for(&sources, SUITE)
        .or_else(|| sources.iter().find_map(|s| s.uris.first().cloned()))
        .ok_or_else(|| {
            RunError::Build("no apt mirror in /etc/apt/sources.list(.d): cannot mmdebstrap".into())
        })?;
    if which_mmdebstrap().is_none() {
        return Err(RunError::Build(
            "mmdebstrap is not installed: `apt-get install mmdebstrap` (scripts/prereqs does)"
                .into(),
        ));
    }
    output::progress(&format!(
        "mmdebstrap {SUITE} from the host's apt mirror (about 15 s)…"
    ));
    let tmp = format!("{tag}-partial-{}", std::process::id());
    // Its progress on stderr goes to the caller's (a log under scripts/shell).
    let mut strap = Command::new("mmdebstrap")
        .args([
            "--quiet",
            "--variant=minbase",
            "--include=ca-certificates",
            SUITE,
            "-",
        ])
        .arg(&mirror)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| RunError::Build(format!("mmdebstrap: {e}")))?;
    let import = docker::cmd()
        .args(["import", "--change", "CMD [\"/bin/bash\"]", "-", &tmp])
        .stdin(strap.stdout.take().expect("piped"))
        .stdout(Stdio::null())
        .status();
    let strap_ok = strap.wait().is_ok_and(|s| s.success());
    if !(strap_ok && import.is_ok_and(|s| s.success())) || crate::interrupted() {
        let _ = docker::probe(&["rmi", &tmp]);
        return Err(if crate::interrupted() {
            RunError::Interrupted
        } else {
            RunError::Build(format!(
                "mmdebstrap {SUITE} from {mirror}, or docker import of its root, failed (above)"
            ))
        });
    }
    docker::output(&["tag", &tmp, &tag])?;
    docker::output(&["rmi", &tmp])?;
    Ok(tag)
}

pub fn which_mmdebstrap() -> Option<PathBuf> {
    ["/usr/bin/mmdebstrap", "/usr/sbin/mmdebstrap"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// `latest` becomes a concrete version (npm view), so Docker's layer cache
/// keys on the version and a new release means a new layer.
fn resolve_version(package: &str, v: &str) -> Result<String, RunError> {
    if v != "latest" {
        return Ok(v.to_owned());
    }
    // Without npm on the host (or without an answer), the image's own npm
    // installs the newest at build time, from the registry it is
    // configured for; the layer is then cached until `--no-cache`.
    match npm(&["view", package, "version"]) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Ok("latest".into()),
    }
}

/// The host's npm registry, from npm's own configuration (never hard-coded),
/// so a corporate mirror works inside the build too.
pub fn npm_registry() -> Option<String> {
    match npm(&["config", "get", "registry"]) {
        Some(s) => Some(s).filter(|s| s.starts_with("http")),
        None => npmrc_registry(),
    }
}

/// Without npm on the host: the registry its configuration names, read as
/// npm would (environment, then ~/.npmrc, then the global npmrc files).
fn npmrc_registry() -> Option<String> {
    for k in ["npm_config_registry", "NPM_CONFIG_REGISTRY"] {
        if let Some(v) = std::env::var(k).ok().filter(|v| v.starts_with("http")) {
            return Some(v);
        }
    }
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".npmrc"));
    home.into_iter()
        .chain(["/etc/npmrc", "/usr/etc/npmrc", "/usr/local/etc/npmrc"].map(PathBuf::from))
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .find_map(|text| registry_line(&text))
}

fn registry_line(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "registry" && v.trim().starts_with("http")).then(|| v.trim().to_owned())
    })
}

/// The host's npm, run from `/`: npm reads a project's .npmrc from the
/// directory it runs in, and build-base runs in a repository the agent
/// writes, whose .npmrc must not choose the registry the image installs from.
fn npm_cmd() -> Command {
    let mut c = Command::new("npm");
    c.current_dir("/").stdin(Stdio::null());
    // Under `npm run` or `npx` in a repository, npm has exported its
    // configuration as npm_config_*, that .npmrc's registry included: the
    // host's npm reads its own files again instead.
    if std::env::var_os("npm_config_local_prefix").is_some()
        || std::env::var_os("npm_lifecycle_event").is_some()
    {
        for (k, _) in std::env::vars_os() {
            let npm_set = k.to_str().is_some_and(|k| {
                k.get(..11)
                    .is_some_and(|p| p.eq_ignore_ascii_case("npm_config_"))
            });
            if npm_set {
                c.env_remove(k);
            }
        }
    }
    c
}

/// The host npm's trimmed stdout; None when npm is missing, "" when it failed.
fn npm(args: &[&str]) -> Option<String> {
    let out = npm_cmd().args(args).stderr(Stdio::null()).output().ok()?;
    Some(if out.status.success() {
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    } else {
        String::new()
    })
}

/// Directory holding this sbx-run binary, where the other tools are built.
fn tool_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("SBX_BIN_DIR") {
        return Some(PathBuf::from(d));
    }
    std::env::current_exe()
        .ok()?
        .parent()
        .map(Path::to_path_buf)
}

/// Build agent-sandbox-base:<tag>.
pub fn build_base(_common: &CommonArgs, o: &BaseOpts) -> Result<String, RunError> {
    docker::require_engine()?;
    let image = format!("{BASE_IMAGE}:{}", o.tag);
    let ctx = tempfile::Builder::new()
        .prefix("sbx-base-")
        .tempdir()
        .map_err(|e| RunError::Io(std::env::temp_dir(), e))?;
    let c = ctx.path();
    let write = |name: &str, data: &[u8], mode: u32| -> Result<(), RunError> {
        use std::os::unix::fs::PermissionsExt;
        let p = c.join(name);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).map_err(|e| RunError::Io(d.to_owned(), e))?;
        }
        std::fs::write(&p, data).map_err(|e| RunError::Io(p.clone(), e))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| RunError::Io(p, e))
    };
    write("Dockerfile", DOCKERFILE.as_bytes(), 0o644)?;
    write("bashrc", BASHRC.as_bytes(), 0o644)?;
    write("ca/.keep", b"", 0o644)?;
    if let Some(ca) = &o.ca_cert {
        let data = std::fs::read(ca).map_err(|e| RunError::Io(ca.clone(), e))?;
        if !String::from_utf8_lossy(&data).contains("-----BEGIN CERTIFICATE-----") {
            return Err(RunError::Usage(format!(
                "{}: not a PEM certificate bundle (expected -----BEGIN CERTIFICATE-----)",
                ca.display()
            )));
        }
        write("ca/sbx-extra.crt", &data, 0o644)?;
    }
    std::fs::create_dir_all(c.join("bin")).map_err(|e| RunError::Io(c.join("bin"), e))?;
    write("guest.toml", GUEST_TOML.as_bytes(), 0o644)?;
    let dir = tool_dir();
    // Without these the sandbox would start without its init, firewall or
    // git guard: refuse before building anything.
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|t| !dir.as_ref().is_some_and(|d| d.join(t).is_file()))
        .collect();
    if !missing.is_empty() && !o.prefetch {
        return Err(RunError::Build(format!(
            "cannot build {image}: {} not found in {} (build them first: `make build`, or `make debug` for debug builds, or set SBX_BIN_DIR)",
            missing.join(", "),
            dir.as_deref()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|| "the sbx-run directory".into())
        )));
    }
    let mut copied = Vec::new();
    if let Some(dir) = dir.filter(|_| !o.prefetch) {
        for t in TOOLS {
            let src = dir.join(t);
            if src.is_file() {
                std::fs::copy(&src, c.join("bin").join(t))
                    .map_err(|e| RunError::Io(src.clone(), e))?;
                copied.push(*t);
            }
        }
    }
    if !o.prefetch {
        output::info(&format!("sbx tools in the image: {}", copied.join(" ")));
    }
    if o.git_delta_version != "none" && !o.prefetch {
        let delta = ensure_delta(&o.git_delta_version)?;
        std::fs::copy(&delta, c.join("bin/delta")).map_err(|e| RunError::Io(delta.clone(), e))?;
    }

    let from = if o.bootstrap {
        ensure_bootstrap()?
    } else {
        "debian:bookworm-slim".to_owned()
    };
    let mut build_args: Vec<(&str, String)> = vec![("FROM_IMAGE", from.clone())];
    // The AI CLIs need npm: without it they wait for a later build-base.
    let mut no_ai_clis = o.no_ai_clis;
    write("npm/.keep", b"", 0o644)?;
    if let Err(why) = npm_release(&cache_dir(), &c.join("npm/npm.tgz")) {
        let what = format!("{image}: no npm in the image: {why}");
        if crate::ci() {
            return Err(RunError::Build(format!("{what} (CI=true)")));
        }
        let clis = if no_ai_clis {
            ""
        } else {
            ", Claude Code and Codex"
        };
        output::warn(&format!(
            "{what}; building it without npm{clis}: `sbx-run build-base{}` adds {} once npm answers",
            if o.bootstrap { " --bootstrap" } else { "" },
            if no_ai_clis { "it" } else { "them" },
        ));
        no_ai_clis = true;
    }
    if no_ai_clis {
        build_args.push(("INSTALL_AI_CLIS", "0".into()));
    } else {
        build_args.extend([
            (
                "CLAUDE_CODE_VERSION",
                resolve_version("@anthropic-ai/claude-code", &o.claude_code_version)?,
            ),
            (
                "CODEX_VERSION",
                resolve_version("@openai/codex", &o.codex_version)?,
            ),
            (
                "AST_GREP_VERSION",
                resolve_version("@ast-grep/cli", &o.ast_grep_version)?,
            ),
        ]);
        if let Some(r) = npm_registry() {
            build_args.push(("NPM_CONFIG_REGISTRY", r));
        }
    }
    output::progress(&format!("building {image} FROM {from}…"));
    let build = |build_args: &[(&str, String)]| -> Result<(), RunError> {
        // A prefetch wants only the cache: no tag, so a half image never takes one.
        let mut cmd = docker::cmd();
        if o.prefetch {
            cmd.args(["build", "--force-rm", "--target", "deps"]);
        } else {
            cmd.args(["build", "--force-rm", "--tag", &image]);
        }
        for (k, v) in build_args {
            cmd.arg("--build-arg").arg(format!("{k}={v}"));
        }
        cmd.arg(c);
        let log = log_to(&mut cmd, &image)?;
        run_checked(&mut cmd, &format!("docker build of {image}")).map_err(|e| {
            let npm_failed = log.as_deref().is_some_and(|l| {
                std::fs::read_to_string(l).is_ok_and(|t| t.contains(NPM_UNREACHABLE_MARK))
            });
            if npm_failed {
                RunError::Build(NPM_UNREACHABLE.into())
            } else {
                with_tail(e, log.as_deref())
            }
        })
    };
    match build(&build_args) {
        // The AI CLIs' step fails rather than caching an image without
        // them, so a later build-base tries the registry again.
        Err(RunError::Build(m)) if m == NPM_UNREACHABLE => {
            let later = format!(
                "`sbx-run build-base{}` adds them once the registry answers",
                if o.bootstrap { " --bootstrap" } else { "" }
            );
            if crate::ci() {
                return Err(RunError::Build(format!(
                    "{image}: {NPM_UNREACHABLE} (CI=true): {later}"
                )));
            }
            output::warn(&format!(
                "{image}: {NPM_UNREACHABLE}: building it without Claude Code and Codex; {later}"
            ));
            build_args.retain(|(k, _)| !k.ends_with("_VERSION") && *k != "NPM_CONFIG_REGISTRY");
            build_args.push(("INSTALL_AI_CLIS", "0".into()));
            build(&build_args)?;
        }
        r => r?,
    }
    if o.prefetch {
        output::progress(&format!("cached the package layers of {image}"));
        return Ok(image);
    }
    if !no_ai_clis && !ai_clis_present(&image) && crate::ci() {
        return Err(RunError::Build(format!(
            "{image}: the AI CLIs are missing (CI=true)"
        )));
    }
    output::progress(&format!("built {image}"));
    Ok(image)
}

/// Whether the image answers `claude --version` and `codex --version`.
fn ai_clis_present(image: &str) -> bool {
    docker::probe(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "sh",
        image,
        "-c",
        "claude --version && codex --version",
    ])
    .is_ok_and(|o| o.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npmrc_registry_lines() {
        let t = "; comment\n//host/:_authToken=x\nregistry = https://mirror.invalid/npm/\n";
        assert_eq!(
            registry_line(t).as_deref(),
            Some("https://mirror.invalid/npm/")
        );
        assert_eq!(registry_line("registry=file:///x\n"), None);
    }

    #[test]
    fn only_the_pinned_hash_matches() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("npm.tgz");
        std::fs::write(&f, b"abc").unwrap();
        let abc = "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f";
        assert!(sha512_matches(&f, abc));
        assert!(!sha512_matches(&f, &abc.replace('f', "e")));
        assert!(!sha512_matches(&d.path().join("missing"), abc));
        assert_eq!(NPM_SHA512.len(), 128);
    }

    #[test]
    fn a_cache_file_changed_after_the_check_never_reaches_the_context() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let d = tempfile::tempdir().unwrap();
        let abc = "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f";
        let cache = d.path().join("npm.tgz");
        let next = d.path().join("npm.tgz.next");
        std::fs::write(&cache, b"abc").unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            // Whoever can write the cache swaps a good and a bad tarball.
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    for body in [&b"abc"[..], b"abd"] {
                        std::fs::write(&next, body).unwrap();
                        std::fs::rename(&next, &cache).unwrap();
                    }
                }
            });
            // Stops the swapper when an assertion below fails too.
            struct Stop<'a>(&'a AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
            let _stop = Stop(&stop);
            let to = d.path().join("context-npm.tgz");
            for _ in 0..200 {
                if copy_checked(&cache, &to, abc) {
                    assert_eq!(std::fs::read(&to).unwrap(), b"abc");
                } else {
                    assert!(!to.exists());
                }
            }
        });
    }

    #[test]
    fn a_relative_xdg_cache_home_is_ignored() {
        let home = Some("/home/u".into());
        assert_eq!(
            cache_dir_from(Some("/c".into()), home.clone()),
            Path::new("/c/sbx")
        );
        for xdg in ["", ".cache", "repo/.cache"] {
            assert_eq!(
                cache_dir_from(Some(xdg.into()), home.clone()),
                Path::new("/home/u/.cache/sbx"),
                "{xdg:?}"
            );
        }
        assert_eq!(cache_dir_from(None, None), Path::new("/var/tmp/sbx"));
    }

    #[test]
    fn bootstrap_tag_is_stable() {
        assert!(bootstrap_tag().starts_with("agent-sandbox-bootstrap:bookworm-"));
        assert_eq!(bootstrap_tag(), bootstrap_tag());
    }
}
