//! Images: the thin per-repo image here; the mmdebstrap FROM image and
//! the shared base image are sbx-image's (re-exported), so scripts/shell
//! can prefetch the base's layers before sbx-run is compiled. Every build
//! tags only when it completes, so an interrupted build leaves no
//! half-tagged image.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use clap::Args;
use md5::{Digest, Md5};
use sbx_core::cli::CommonArgs;
use sbx_core::output;

pub use sbx_image::base::{
    BASHRC, BaseOpts, DOCKERFILE, GUEST_TOML, REQUIRED, TOOLS, bootstrap_tag, build_base,
    build_log, default_base_tag, ensure_bootstrap,
};
use sbx_image::base::{check_status, log_to, which_mmdebstrap, with_tail};

use crate::names::{BASE_IMAGE, LABEL_IMAGE};
use crate::{RunError, docker};

pub const REPO_DOCKERFILE: &str = include_str!("../../../base-image/repo.Dockerfile");
pub const CONFIG_TEMPLATE: &str = include_str!("../../../base-image/config.toml");

#[derive(Debug, Clone, Args)]
pub struct BuildOpts {
    /// Tag of agent-sandbox-base to build on.
    #[arg(
        long,
        value_name = "TAG",
        env = "SBX_BASE_TAG",
        default_value = "latest"
    )]
    pub base_tag: String,
    /// Allow ENTRYPOINT and USER in .agent-sandbox/Dockerfile.
    #[arg(long)]
    pub allow_entrypoint: bool,
}

impl Default for BuildOpts {
    fn default() -> Self {
        Self {
            base_tag: default_base_tag(),
            allow_entrypoint: false,
        }
    }
}

/// Instructions a per-repo Dockerfile may not use without --allow-entrypoint.
fn check_repo_dockerfile(text: &str, path: &Path, allow_entrypoint: bool) -> Result<(), RunError> {
    let mut logical = String::new();
    let mut first_from: Option<String> = None;
    for raw in text.lines() {
        let line = raw.trim();
        if line.starts_with('#') && logical.is_empty() {
            continue;
        }
        logical.push_str(line.trim_end_matches('\\'));
        logical.push(' ');
        if line.ends_with('\\') {
            continue;
        }
        let instr = logical
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase();
        if instr == "FROM" && first_from.is_none() {
            first_from = Some(logical.trim().to_owned());
        }
        if !allow_entrypoint && (instr == "ENTRYPOINT" || instr == "USER") {
            return Err(RunError::Usage(format!(
                "{}: {instr} would replace the sandbox's init or user; remove it, or pass --allow-entrypoint",
                path.display()
            )));
        }
        logical.clear();
    }
    match first_from {
        Some(f) if f.contains(BASE_IMAGE) => Ok(()),
        _ => Err(RunError::Usage(format!(
            "{}: the first FROM must be {BASE_IMAGE}:${{BASE_IMAGE_TAG}}",
            path.display()
        ))),
    }
}

/// Build the per-repo image (from .agent-sandbox/Dockerfile, or the
/// template when the repository has none).
pub fn build_repo(ws: &crate::workspace::Workspace, o: &BuildOpts) -> Result<(), RunError> {
    docker::require_engine()?;
    let base = format!("{BASE_IMAGE}:{}", o.base_tag);
    if !docker::exists("image", &base)? {
        // Only the default base is built on demand: a tag the user named
        // and that is not there is a mistake to report, not to paper over.
        if o.base_tag != default_base_tag() {
            return Err(RunError::Usage(format!(
                "{base} does not exist: build it with `sbx-run build-base --bootstrap --tag {}`, or name an existing tag",
                o.base_tag
            )));
        }
        output::progress(&format!("{base} is missing: building it"));
        let opts = BaseOpts {
            tag: o.base_tag.clone(),
            bootstrap: !docker_hub_image_present() && which_mmdebstrap().is_some(),
            ..BaseOpts::default()
        };
        build_base(&CommonArgs::default(), &opts)?;
    }
    let (text, file) = repo_dockerfile(ws)?;
    check_repo_dockerfile(&text, &file, o.allow_entrypoint)?;
    let base_id = docker::inspect("image", &base)?
        .and_then(|b| b["Id"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let image = &ws.names.image;
    output::progress(&format!("building {image}…"));
    // The Dockerfile goes on stdin; the context is .agent-sandbox/, or an
    // empty directory that lives until the build ends.
    let empty;
    let context = if ws.config_dir().is_dir() {
        ws.config_dir()
    } else {
        empty = tempfile::tempdir().map_err(|e| RunError::Io(std::env::temp_dir(), e))?;
        empty.path().to_path_buf()
    };
    let mut cmd = docker::cmd();
    // The label lets `prune` find the image once the workspace is gone.
    // --force-rm: the legacy builder keeps a failed step's container.
    cmd.args(["build", "--force-rm", "--tag", image, "--label"])
        .arg(format!("{LABEL_IMAGE}={}", ws.path.display()))
        .arg("--label")
        .arg(format!("{LABEL_BASE}={}", o.base_tag))
        .arg("--label")
        .arg(format!("{LABEL_BASE_ID}={base_id}"))
        .arg("--label")
        .arg(format!("{LABEL_RECIPE}={}", digest(&text)))
        .arg("--label")
        .arg(format!("{LABEL_ENTRYPOINT}={}", o.allow_entrypoint))
        .arg("--build-arg")
        .arg(format!("BASE_IMAGE_TAG={}", o.base_tag))
        .args(["--file", "-"])
        .arg(&context)
        .stdin(Stdio::piped());
    let log = log_to(&mut cmd, image)?;
    let what = format!("docker build of {image}");
    let mut child = cmd
        .spawn()
        .map_err(|e| RunError::Build(format!("{what}: {e}")))?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped");
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| RunError::Build(format!("{what}: {e}")))?;
    }
    check_status(child.wait(), &what).map_err(|e| with_tail(e, log.as_deref()))
}

// What a per-repo image was built from, so a start can tell it is stale.
const LABEL_BASE: &str = "sbx.image.base";
const LABEL_BASE_ID: &str = "sbx.image.base-id";
const LABEL_RECIPE: &str = "sbx.image.dockerfile-md5";
const LABEL_ENTRYPOINT: &str = "sbx.image.allow-entrypoint";

fn repo_dockerfile(ws: &crate::workspace::Workspace) -> Result<(String, PathBuf), RunError> {
    let file = ws.config_dir().join("Dockerfile");
    let text = if file.is_file() {
        std::fs::read_to_string(&file).map_err(|e| RunError::Io(file.clone(), e))?
    } else {
        REPO_DOCKERFILE.to_owned()
    };
    Ok((text, file))
}

fn digest(text: &str) -> String {
    Md5::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Why the per-repo image must be (re)built before a new container is made
/// from it, with the options it was built with: missing, built by an older
/// sbx, its base image rebuilt since, or its Dockerfile changed. None: use it.
pub fn repo_rebuild(
    ws: &crate::workspace::Workspace,
) -> Result<Option<(BuildOpts, &'static str)>, RunError> {
    let Some(image) = docker::inspect("image", &ws.names.image)? else {
        return Ok(Some((BuildOpts::default(), "")));
    };
    let labels = &image["Config"]["Labels"];
    let Some(tag) = labels[LABEL_BASE].as_str() else {
        return Ok(Some((
            BuildOpts::default(),
            "it was built by an older sbx-run",
        )));
    };
    let opts = BuildOpts {
        base_tag: tag.to_owned(),
        allow_entrypoint: labels[LABEL_ENTRYPOINT] == "true",
    };
    let base = docker::inspect("image", &format!("{BASE_IMAGE}:{tag}"))?;
    let base_id = base.as_ref().and_then(|b| b["Id"].as_str());
    let (text, _) = repo_dockerfile(ws)?;
    Ok(stale(labels, base_id, &digest(&text)).map(|why| (opts, why)))
}

fn stale(labels: &serde_json::Value, base_id: Option<&str>, recipe: &str) -> Option<&'static str> {
    // A base that is gone cannot be built on: keep what there is.
    if base_id.is_some_and(|id| labels[LABEL_BASE_ID] != id) {
        return Some("its base image was rebuilt since");
    }
    (labels[LABEL_RECIPE] != recipe).then_some("its Dockerfile changed since")
}

fn docker_hub_image_present() -> bool {
    docker::exists("image", "debian:bookworm-slim").unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_dockerfile_rules() {
        let p = Path::new("Dockerfile");
        assert!(check_repo_dockerfile(REPO_DOCKERFILE, p, false).is_ok());
        let bad = "FROM agent-sandbox-base:latest\nRUN true \\\n  && true\nUSER root\n";
        assert!(
            check_repo_dockerfile(bad, p, false)
                .unwrap_err()
                .to_string()
                .contains("USER")
        );
        assert!(check_repo_dockerfile(bad, p, true).is_ok());
        let ep = "FROM agent-sandbox-base:x\nentrypoint [\"sh\"]\n";
        assert!(check_repo_dockerfile(ep, p, false).is_err());
        assert!(
            check_repo_dockerfile("FROM debian\n", p, false)
                .unwrap_err()
                .to_string()
                .contains("first FROM")
        );
        // A continuation line that merely mentions USER is not an instruction.
        let ok = "FROM agent-sandbox-base:x\nRUN echo \\\n USER\n";
        assert!(check_repo_dockerfile(ok, p, false).is_ok());
    }

    #[test]
    fn a_repo_image_is_stale_when_its_base_or_dockerfile_changed() {
        let labels = serde_json::json!({LABEL_BASE_ID: "sha256:a", LABEL_RECIPE: "r1"});
        assert_eq!(stale(&labels, Some("sha256:a"), "r1"), None);
        assert_eq!(stale(&labels, None, "r1"), None);
        assert!(
            stale(&labels, Some("sha256:b"), "r1")
                .unwrap()
                .contains("base")
        );
        assert!(
            stale(&labels, Some("sha256:a"), "r2")
                .unwrap()
                .contains("Dockerfile")
        );
        assert!(stale(&serde_json::json!(null), Some("sha256:a"), "r1").is_some());
    }
}
