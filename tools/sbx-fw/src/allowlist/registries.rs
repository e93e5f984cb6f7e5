//! The package registries the image's tools are configured to use, read
//! from their own files and variables at run time.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use super::url_host;

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Where each tool's files are: under `root`, with `$HOME`.
struct Files<'a> {
    root: &'a Path,
    home: PathBuf,
}

impl Files<'_> {
    /// The text of each of `files` that exists, read under the root.
    fn read(&self, files: &[PathBuf]) -> Vec<String> {
        files
            .iter()
            .filter_map(|p| {
                fs::read_to_string(self.root.join(p.strip_prefix("/").unwrap_or(p))).ok()
            })
            .collect()
    }
}

/// Registry hosts the image's npm, pip, cargo and apt are configured to
/// use, read from their own files and environment at run time. Nothing is
/// assumed: a tool with no configured registry contributes nothing here
/// (the base image writes npm's effective registry into its global npmrc).
pub fn registry_hosts(root: &Path, env: Env<'_>) -> Vec<String> {
    let home = env("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    let files = Files { root, home };
    let mut urls = npm(&files, env);
    urls.extend(pip(&files, env));
    urls.extend(cargo(&files, env));
    // apt: one-line and deb822 sources, disabled stanzas left out.
    for src in sbx_core::apt::read_sources(root) {
        urls.extend(src.uris);
    }
    let hosts: BTreeSet<String> = urls
        .iter()
        .filter_map(|u| url_host(u))
        .map(|d| d.name)
        .collect();
    hosts.into_iter().collect()
}

/// npm: builtin, global and user npmrc; `registry=` and `@scope:registry=`.
fn npm(files: &Files<'_>, env: Env<'_>) -> Vec<String> {
    let mut urls = Vec::new();
    let rcs = [
        // Builtin: the base image's npm release, and Debian's npm package.
        PathBuf::from("/usr/local/lib/node_modules/npm/npmrc"),
        PathBuf::from("/usr/share/nodejs/npm/npmrc"),
        PathBuf::from("/usr/etc/npmrc"),
        PathBuf::from("/etc/npmrc"),
        files.home.join(".npmrc"),
    ];
    for text in files.read(&rcs) {
        for (k, v) in text.lines().filter_map(|l| l.split_once('=')) {
            let k = k.trim();
            if k == "registry" || k.ends_with(":registry") {
                urls.push(v.trim().to_owned());
            }
        }
    }
    for var in ["NPM_CONFIG_REGISTRY", "npm_config_registry"] {
        urls.extend(env(var));
    }
    urls
}

/// pip: pip.conf files and PIP_* variables; index-url, extra-index-url,
/// find-links (values may go on over indented lines). trusted-host names
/// no registry of its own (it marks one the URLs name), and find-links is
/// often a directory: only what [`url_host`] reads as a URL counts.
fn pip(files: &Files<'_>, env: Env<'_>) -> Vec<String> {
    let mut urls = Vec::new();
    let confs = [
        PathBuf::from("/etc/pip.conf"),
        PathBuf::from("/etc/xdg/pip/pip.conf"),
        files.home.join(".pip/pip.conf"),
        files.home.join(".config/pip/pip.conf"),
    ];
    for text in files.read(&confs) {
        let mut continuing = false;
        for line in text.lines() {
            let t = line.trim();
            if let Some((k, v)) = t.split_once('=') {
                continuing = matches!(k.trim(), "index-url" | "extra-index-url" | "find-links");
                if continuing {
                    urls.extend(v.split_whitespace().map(str::to_owned));
                }
            } else if continuing && line.starts_with(char::is_whitespace) && !t.is_empty() {
                urls.extend(t.split_whitespace().map(str::to_owned));
            } else {
                continuing = false;
            }
        }
    }
    for var in ["PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS"] {
        if let Some(v) = env(var) {
            urls.extend(v.split_whitespace().map(str::to_owned));
        }
    }
    urls
}

/// cargo: `registry` and `index` values anywhere in its config.
fn cargo(files: &Files<'_>, env: Env<'_>) -> Vec<String> {
    let cargo_home = env("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| files.home.join(".cargo"));
    let mut urls = Vec::new();
    for text in files.read(&[cargo_home.join("config.toml"), cargo_home.join("config")]) {
        if let Ok(v) = text.parse::<toml::Table>() {
            collect_cargo(&toml::Value::Table(v), &mut urls);
        }
    }
    urls
}

fn collect_cargo(v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                match (k.as_str(), v) {
                    ("registry" | "index", toml::Value::String(s)) => out.push(s.clone()),
                    _ => collect_cargo(v, out),
                }
            }
        }
        toml::Value::Array(a) => a.iter().for_each(|v| collect_cargo(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_are_read_from_each_tool_config() {
        let root = tempfile::tempdir().unwrap();
        let w = |p: &str, t: &str| {
            let p = root.path().join(p);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, t).unwrap();
        };
        w(
            "etc/npmrc",
            "registry=https://npm.corp.test/\n@acme:registry=https://acme.npm.test/\n",
        );
        // The base image's npm keeps its builtin config beside itself.
        w(
            "usr/local/lib/node_modules/npm/npmrc",
            "globalconfig=/etc/npmrc\nregistry=https://builtin.npm.test/\n",
        );
        w(
            "etc/pip.conf",
            "[global]\nindex-url = https://pypi.corp.test/simple\nextra-index-url =\n  https://extra.pip.test/simple\n",
        );
        w(
            "home/a/.cargo/config.toml",
            "[source.crates-io]\nreplace-with = \"corp\"\n[source.corp]\nregistry = \"sparse+https://cargo.corp.test/\"\n",
        );
        w(
            "etc/apt/sources.list",
            "deb [signed-by=/x.gpg] http://deb.corp.test/debian bookworm main\n# deb http://ignored.test/ x\n",
        );
        w(
            "etc/apt/sources.list.d/d.sources",
            "Types: deb\nURIs: https://sec.corp.test/debian-security\nSuites: x\n\n\
             Types: deb\nURIs: https://off.corp.test/debian\nSuites: x\nEnabled: no\n",
        );
        let env = |k: &str| match k {
            "HOME" => Some("/home/a".to_owned()),
            "PIP_INDEX_URL" => Some("https://env.pip.test/simple".to_owned()),
            // A directory and a bare host: neither names a registry.
            "PIP_FIND_LINKS" => Some("/opt/wheels file:///srv/w".to_owned()),
            "PIP_TRUSTED_HOST" => Some("trusted.pip.test".to_owned()),
            _ => None,
        };
        let hosts = registry_hosts(root.path(), &env);
        assert_eq!(
            hosts,
            [
                "acme.npm.test",
                "builtin.npm.test",
                "cargo.corp.test",
                "deb.corp.test",
                "env.pip.test",
                "extra.pip.test",
                "npm.corp.test",
                "pypi.corp.test",
                "sec.corp.test"
            ]
        );
    }
}
