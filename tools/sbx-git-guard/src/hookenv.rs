//! The environment the real git and the repository's hooks run with: the
//! agent's, minus what would change what a hook does without changing the
//! hook (shell start-up files, exported functions, loader and interpreter
//! injection, hook-manager kill switches, git's test and replace knobs), with
//! one value per name (the first, as git's `getenv` reads it) and the system
//! directories first on PATH.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// Removed by exact name.
pub const STRIPPED: &[&str] = &[
    // Hook managers' own off switches.
    "HUSKY",
    "HUSKY_SKIP_HOOKS",
    "LEFTHOOK",
    "LEFTHOOK_EXCLUDE",
    "SKIP",
    "PRE_COMMIT_ALLOW_NO_CONFIG",
    // Shells: start-up files and options that run before a hook's body.
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "CDPATH",
    "GLOBIGNORE",
    "IFS",
    "PROMPT_COMMAND",
    // Interpreters that hooks are written in.
    "NODE_OPTIONS",
    "NODE_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONINSPECT",
    "PERL5LIB",
    "PERL5OPT",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "GCONV_PATH",
    // git settings that change what a hook's own git commands see or run.
    "GIT_EXTERNAL_DIFF",
    "GIT_DIFF_OPTS",
    "GIT_REPLACE_REF_BASE",
    "GIT_GRAFT_FILE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_SHALLOW_FILE",
    "GIT_ATTR_SOURCE",
    // git's word that its stdout is a pager: `--color=auto` (the diff pin)
    // then colours a hook's `git diff --cached | grep '^+.*X'` (round seven).
    "GIT_PAGER_IN_USE",
    // Pathspec switches: a hook's `git diff --cached -- '*.txt'` matched
    // only a file named `*.txt` (literal, noglob) or none under a directory
    // (glob), and an `:(exclude)` more (icase).
    "GIT_LITERAL_PATHSPECS",
    "GIT_NOGLOB_PATHSPECS",
    "GIT_GLOB_PATHSPECS",
    "GIT_ICASE_PATHSPECS",
    // The guard's own channel to its hook steps: set by the guard only.
    crate::hooks::TRUSTED_ENV,
    crate::hooks::HOOKS_ONLY_ENV,
    crate::hooks::COMMIT_ENV,
    crate::hooks::COMMON_ENV,
    crate::ledger::VERIFY_ENV,
    crate::ledger::FETCH_ENV,
    crate::ledger::RECEIVE_ENV,
    crate::index::PRIVATE_VAR,
    // The step's word that pre-commit's view is made: set by the agent, the
    // hook ran on the real git dir with no view and no pin (a46).
    crate::ledger::VIEW_MADE_ENV,
    HOOK_PATH_ENV,
];

/// Removed by prefix: every `LD_*` (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT),
/// bash's exported functions, git's test knobs.
pub const STRIPPED_PREFIXES: &[&str] = &["LD_", "BASH_FUNC_", "GIT_TEST_"];

/// Put first on PATH, so a `sh`, `env` or `node` the agent planted earlier
/// on PATH is not what a `#!/usr/bin/env sh` hook gets.
pub const SYSTEM_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

pub fn stripped(name: &[u8]) -> bool {
    STRIPPED.iter().any(|s| s.as_bytes() == name)
        || STRIPPED_PREFIXES
            .iter()
            .any(|p| name.starts_with(p.as_bytes()))
}

/// System directories, then the caller's PATH without them (so its own
/// entries, node_modules/.bin for instance, still resolve after them).
pub fn system_first_path(path: Option<&OsStr>) -> OsString {
    let mut out = OsString::from(SYSTEM_PATH.join(":"));
    if let Some(p) = path {
        for dir in p.as_bytes().split(|b| *b == b':') {
            if dir.is_empty() || SYSTEM_PATH.iter().any(|s| s.as_bytes() == dir) {
                continue;
            }
            out.push(":");
            out.push(OsStr::from_bytes(dir));
        }
    }
    out
}

/// Where git's environment keeps the caller's PATH for the hooks, in a
/// sandbox (see [`git_only_path`]); set by the guard only.
pub const HOOK_PATH_ENV: &str = "SBX_HOOK_PATH";

/// In a sandbox git looks programs up on the system directories alone
/// (root's in the image): a name git runs from PATH (`ssh` for an ssh
/// remote, `ssh-keygen` for ssh signing, `info` for `help -i`, a browser
/// or merge tool by name) found in a directory of the agent's ran as git's
/// child with git's group, which the broker trusts (round eight). The
/// caller's PATH (system first) goes to the hooks, which the broker starts
/// with it ([`for_hooks`]): a hook's tools still resolve.
pub fn git_only_path(env: &mut Vec<(OsString, OsString)>) {
    let Some(i) = env.iter().position(|(k, _)| k == "PATH") else {
        return;
    };
    let caller = std::mem::replace(&mut env[i].1, OsString::from(SYSTEM_PATH.join(":")));
    env.retain(|(k, _)| k != HOOK_PATH_ENV);
    env.push((HOOK_PATH_ENV.into(), caller));
}

/// A hook's environment: git's, with the caller's PATH back (system
/// directories first) where [`git_only_path`] put it aside.
pub fn for_hooks(mut env: Vec<(OsString, OsString)>) -> Vec<(OsString, OsString)> {
    let Some(i) = env.iter().position(|(k, _)| k == HOOK_PATH_ENV) else {
        return env;
    };
    let caller = env.remove(i).1;
    env.retain(|(k, _)| k != "PATH");
    env.push(("PATH".into(), system_first_path(Some(&caller))));
    env
}

/// The home every repository hook runs with in a sandbox: root-owned and
/// read-only (the image makes it), so no per-user configuration of the
/// agent's (`~/.gitconfig` with a `diff.*.textconv`, a Python user site's
/// `usercustomize.py`, `~/.npmrc`, gem paths) reaches a hook or the git and
/// tools it runs (issue 46, routes 1 and 5).
pub const HOOK_HOME: &str = "/usr/lib/sbx/hook-home";

/// What a hook keeps from git's environment, by exact name: terminal,
/// locale and identity, the temporary directory, and the sandbox's proxy.
/// Everything else (`XDG_*`, `npm_config_*`, `GEM_*`, `PYTHON*`, `BASH_ENV`,
/// `ENV`, `NODE_OPTIONS`...) is dropped: an allowlist, so the next
/// interpreter's knob is not one more name to strip.
const HOOK_KEPT: &[&str] = &[
    "PATH",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "COLUMNS",
    "LINES",
    "LANG",
    "LANGUAGE",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "HOSTNAME",
    "TMPDIR",
    "CI",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "all_proxy",
];

/// ...and by prefix: git's own (`GIT_INDEX_FILE`, `GIT_DIR`, the author,
/// the guard's vetted `GIT_CONFIG_PARAMETERS`; the guard judges each
/// `GIT_*` of the agent's before git runs, and the hook's git calls pass
/// it again), the sandbox's (`SBX_*`: the broker's socket, the agent's
/// name for audit), and the locale categories.
const HOOK_KEPT_PREFIXES: &[&str] = &["GIT_", "SBX_", "LC_"];

fn hook_kept(name: &[u8]) -> bool {
    HOOK_KEPT.iter().any(|k| k.as_bytes() == name)
        || HOOK_KEPT_PREFIXES
            .iter()
            .any(|p| name.starts_with(p.as_bytes()))
}

/// A hook's environment in a sandbox, built from an allowlist over
/// [`for_hooks`]'s: `HOME` is [`HOOK_HOME`]; Python skips the user site
/// whatever the home; and the two caches hook frameworks must write
/// (pre-commit's environments, npm's for `npx`) are the agent's own
/// (`agent_home`: the uid's home from the password file), as the
/// work tree's `node_modules` and `.pre-commit-config.yaml` already are:
/// what a hook runs from there is the boundary check's, not this one's.
pub fn allowlisted(
    env: Vec<(OsString, OsString)>,
    agent_home: Option<&std::path::Path>,
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = for_hooks(env)
        .into_iter()
        .filter(|(k, _)| hook_kept(k.as_bytes()))
        .collect();
    out.push(("HOME".into(), HOOK_HOME.into()));
    out.push(("PYTHONNOUSERSITE".into(), "1".into()));
    if let Some(h) = agent_home.filter(|h| h.is_absolute()) {
        out.push(("PRE_COMMIT_HOME".into(), h.join(".cache/pre-commit").into()));
        out.push(("npm_config_cache".into(), h.join(".npm").into()));
    }
    out
}

/// A pass-through helper's environment in a sandbox: no per-user
/// configuration either (`uploadpack.packObjectsHook` is read from
/// `~/.gitconfig`, the agent's file, and runs with git's group).
pub fn pass_through(
    mut env: Vec<(OsString, OsString)>,
    sandboxed: bool,
) -> Vec<(OsString, OsString)> {
    if sandboxed {
        env.retain(|(k, _)| k != "HOME" && k != "XDG_CONFIG_HOME");
        env.push(("HOME".into(), HOOK_HOME.into()));
    }
    env
}

/// The cleaned environment: first value per name, stripped names gone,
/// PATH system-first.
pub fn clean(env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = Vec::with_capacity(env.len() + 1);
    let mut path = None;
    for (k, v) in env {
        if out.iter().any(|(o, _)| o == k) || path.is_some() && k == "PATH" {
            continue;
        }
        if k == "PATH" {
            path = Some(v.clone());
            continue;
        }
        if stripped(k.as_bytes()) || k.as_bytes().contains(&b'=') || k.is_empty() {
            continue;
        }
        out.push((k.clone(), v.clone()));
    }
    out.push(("PATH".into(), system_first_path(path.as_deref())));
    out.extend(
        FORCED
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    );
    out
}

/// Set for git and every hook: replace refs and `info/grafts` rewrite what
/// a commit's tree and parents read as, so `git replace --edit HEAD` made
/// pre-commit diff the index against a tree of the agent's choosing, and a
/// graft (or `replace --graft`) made a rewind look like a fast-forward to
/// git's push and to the pre-push step. A graft file that cannot exist
/// (git skips a missing one silently; /dev/null would print its advice).
pub const FORCED: &[(&str, &str)] = &[
    ("GIT_NO_REPLACE_OBJECTS", "1"),
    ("GIT_GRAFT_FILE", "/proc/self/sbx-no-grafts"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_get_an_allowlist_and_a_home_the_agent_does_not_own() {
        let e = |k: &str, v: &str| (OsString::from(k), OsString::from(v));
        let env = vec![
            e("HOME", "/home/agent"),
            e("XDG_CONFIG_HOME", "/home/agent/x"),
            e("PYTHONUSERBASE", "/home/agent/py"),
            e("npm_config_userconfig", "/home/agent/.npmrc2"),
            e("GEM_PATH", "/home/agent/gems"),
            e("BASH_ENV", "/home/agent/env"),
            e("ENV", "/home/agent/env"),
            e("GIT_INDEX_FILE", "/w/.git/index"),
            e("SBX_AGENT", "claude"),
            e("LC_ALL", "C"),
            e("PATH", "/usr/bin"),
            e(HOOK_PATH_ENV, "/home/agent/bin:/usr/bin"),
        ];
        let out = allowlisted(env, Some(std::path::Path::new("/home/agent")));
        let names: Vec<_> = out.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "GIT_INDEX_FILE",
                "SBX_AGENT",
                "LC_ALL",
                "PATH",
                "HOME",
                "PYTHONNOUSERSITE",
                "PRE_COMMIT_HOME",
                "npm_config_cache"
            ]
        );
        assert!(out.contains(&e("HOME", HOOK_HOME)));
        assert!(out.contains(&e(
            "PATH",
            &format!("{}:/home/agent/bin", SYSTEM_PATH.join(":"))
        )));
    }

    #[test]
    fn clean_keeps_first_strips_and_orders_path() {
        let e = |k: &str, v: &str| (OsString::from(k), OsString::from(v));
        let env = vec![
            e("GIT_DIR", "/first"),
            e("GIT_DIR", "/second"),
            e("BASH_ENV", "/tmp/x"),
            e("LD_PRELOAD", "/tmp/x.so"),
            e("BASH_FUNC_npx%%", "() { exit 0; }"),
            e("PATH", "/tmp/evil:/usr/bin:/home/a/bin"),
            e("HOME", "/h"),
            e("GIT_NO_REPLACE_OBJECTS", ""),
        ];
        let out = clean(&env);
        assert_eq!(
            out,
            vec![
                e("GIT_DIR", "/first"),
                e("HOME", "/h"),
                e(
                    "PATH",
                    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/tmp/evil:/home/a/bin"
                ),
                e("GIT_NO_REPLACE_OBJECTS", "1"),
                e("GIT_GRAFT_FILE", "/proc/self/sbx-no-grafts"),
            ]
        );
    }
}
