//! `[network.rules]` expanded for the proxy: presets, the workspace's
//! git remotes for `repo-only`, and the built-in `off` hosts.

use std::collections::BTreeMap;
use std::path::Path;

use sbx_core::config::{Domain, Network};
use sbx_core::netrules::{DEFAULT_OFF, Entry, HostRules, Preset, Rule, remote_repo};

/// The rules in force: the config's, then [`DEFAULT_OFF`] for the hosts
/// it leaves out. `remotes` are the workspace's remote URLs. Also the
/// warnings to print (a `repo-only` host no remote is on).
pub fn expand(net: &Network, remotes: &[String]) -> (BTreeMap<Domain, Vec<Rule>>, Vec<String>) {
    let mut out = BTreeMap::new();
    let mut warn = Vec::new();
    for (host, rules) in &net.rules {
        let repos: Vec<String> = if host.wildcard {
            Vec::new()
        } else {
            let mut v: Vec<String> = remotes
                .iter()
                .filter_map(|u| remote_repo(u, &host.name))
                .collect();
            v.sort();
            v.dedup();
            v
        };
        if rules.uses(Preset::RepoOnly) && repos.is_empty() {
            warn.push(format!(
                "[network.rules] \"{host}\" = repo-only: no remote of the workspace is on {host}, so git may only read there"
            ));
        }
        out.insert(host.clone(), rules.expand(&repos));
    }
    for h in DEFAULT_OFF {
        if let Ok(d) = h.parse::<Domain>() {
            out.entry(d)
                .or_insert_with(|| HostRules(vec![Entry::Preset(Preset::Off)]).expand(&[]));
        }
    }
    (out, warn)
}

/// The remote URLs in `workspace/.git/config`, read as data (no includes,
/// no links followed: the agent writes that file). A worktree's `.git`
/// file, a missing or unreadable config: none.
pub fn workspace_remotes(workspace: &Path) -> Vec<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let git = workspace.join(".git");
    if !std::fs::symlink_metadata(&git).is_ok_and(|m| m.is_dir()) {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    let read = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(git.join("config"))
        .and_then(|f| {
            if !f.metadata()?.is_file() {
                return Err(std::io::Error::other("not a file"));
            }
            f.take(1 << 20).read_to_end(&mut bytes)
        });
    if read.is_err() {
        return Vec::new();
    }
    let Ok(cfg) = gix_config::File::from_bytes_no_includes(
        &bytes,
        gix_config::file::Metadata::from(gix_config::Source::Local),
        Default::default(),
    ) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for sec in cfg.sections_by_name("remote").into_iter().flatten() {
        for k in ["url", "pushurl"] {
            for v in sec.values(k) {
                out.push(v.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_remotes_and_default_off_hosts() {
        let net: Network = toml::from_str(
            r#"
            mode = "proxy"
            [rules]
            "git.test" = "repo-only"
            "other.test" = "repo-only"
            "registry.test" = ["read-only", "POST /-/npm/v1/security/**"]
            "statsig.com" = ["POST /v1/rgstr"]
            "#,
        )
        .unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(".git")).unwrap();
        std::fs::write(
            ws.path().join(".git/config"),
            "[remote \"origin\"]\n\turl = https://git.test/me/app.git\n\
             [remote \"fork\"]\n\turl = x\n\tpushurl = git@git.test:me/fork\n\
             [include]\n\tpath = /etc/evil\n",
        )
        .unwrap();
        let remotes = workspace_remotes(ws.path());
        assert_eq!(remotes.len(), 3, "{remotes:?}");
        let (rules, warn) = expand(&net, &remotes);
        let text = |h: &str| -> Vec<String> {
            rules[&h.parse::<Domain>().unwrap()]
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let git = text("git.test");
        assert!(git.contains(&"POST /me/app.git/git-receive-pack".to_owned()));
        assert!(git.contains(&"POST /me/fork/git-receive-pack".to_owned()));
        assert!(text("other.test").iter().all(|r| !r.starts_with("POST")));
        assert_eq!(warn.len(), 1, "{warn:?}");
        assert!(warn[0].contains("other.test"));
        assert!(text("registry.test").contains(&"POST /-/npm/v1/security/**".to_owned()));
        // Given rules replace the built-in off; the others stay off.
        assert_eq!(text("statsig.com"), ["POST /v1/rgstr"]);
        assert!(text("statsig.anthropic.com").is_empty());
        assert!(text("*.sentry.io").is_empty());
        // A linked config is not read.
        let ws2 = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws2.path().join(".git")).unwrap();
        std::os::unix::fs::symlink(
            ws.path().join(".git/config"),
            ws2.path().join(".git/config"),
        )
        .unwrap();
        assert!(workspace_remotes(ws2.path()).is_empty());
    }
}
