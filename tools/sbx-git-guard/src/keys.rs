//! Which git configuration keys an agent may not set: the ones that move or
//! disable hooks, run commands inside git, or weaken a remote's protection.
//! One table for `-c`, `--config-env`, `GIT_CONFIG_*` and `git config`
//! writes, so every route to the same key gets the same answer.

/// How a key reached git.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `-c`, `--config-env`, `GIT_CONFIG_COUNT`/`PARAMETERS`, alias `-c`.
    Inline,
    /// `git config` set/add/unset.
    Write,
}

/// A key split as git splits it: section and name are case-insensitive
/// (lowercased here); the subsection is kept as written.
#[derive(Debug, PartialEq, Eq)]
pub struct Key<'a> {
    pub section: String,
    pub sub: Option<&'a str>,
    pub name: String,
}

pub fn split(key: &str) -> Option<Key<'_>> {
    let first = key.find('.')?;
    let last = key.rfind('.')?;
    let section = key[..first].to_ascii_lowercase();
    let name = key[last + 1..].to_ascii_lowercase();
    let sub = (first != last).then(|| &key[first + 1..last]);
    Some(Key { section, sub, name })
}

fn is_false(v: Option<&str>) -> bool {
    matches!(
        v.map(|v| v.trim().to_ascii_lowercase()).as_deref(),
        Some("false" | "no" | "off" | "0" | "")
    )
}

fn is_bool(v: Option<&str>) -> bool {
    is_false(v)
        || matches!(
            v.map(|v| v.trim().to_ascii_lowercase()).as_deref(),
            None | Some("true" | "yes" | "on" | "1")
        )
}

/// Is `spec`'s source (before `:`, after `+` or `^`) an object id?
pub(crate) fn refspec_by_id(spec: &str) -> bool {
    let src = spec.trim().trim_start_matches(['+', '^']);
    let src = src.split(':').next().unwrap_or_default();
    src.len() >= 40 && src.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Why setting `key` (to `value`; `None` = boolean true or an unset) is
/// refused, or `None` if it is fine. `hooks_ok` says whether a
/// `core.hooksPath` value names the trusted hooks directory.
pub fn refused(
    key: &str,
    value: Option<&str>,
    via: Via,
    hooks_ok: &dyn Fn(&str) -> bool,
) -> Option<&'static str> {
    let k = split(key)?;
    let (s, sub, n) = (k.section.as_str(), k.sub, k.name.as_str());
    let program = "it names a program git would run";
    Some(match (s, sub, n) {
        ("core", None, "hookspath") => {
            if value.is_some_and(hooks_ok) {
                return None;
            }
            "core.hooksPath moves the hooks away from the repository's own"
        }
        ("include", _, _) | ("includeif", _, _) => {
            "an include pulls in configuration the guard has not checked"
        }
        // Empty: git dies rather than run it (the guard passes these itself
        // for a last word that is no builtin; git's children inherit them).
        ("alias", _, _) if via == Via::Inline && value != Some("") => {
            "an inline alias can expand into anything; store it with `git config alias.NAME` instead"
        }
        ("core", None, "fsmonitor") if !is_bool(value) => program,
        (
            "core",
            None,
            "editor" | "pager" | "sshcommand" | "askpass" | "gitproxy" | "alternaterefscommand",
        ) => program,
        ("core", None, "worktree") => "core.worktree can point the work tree into .git",
        // What a hook's own `git diff --cached` shows: an attributes file
        // saying `* -diff`, or a size over which every file is binary, turn
        // the staged text into "Binary files differ"; core.whitespace turns
        // off `diff --check` (git's sample pre-commit).
        ("core", None, "attributesfile" | "bigfilethreshold" | "whitespace")
            if value != Some("\u{0}") =>
        {
            "it changes what the hooks' own git commands report about the staged content"
        }
        // The commit-msg hook reads the message before git's cleanup, which
        // drops comment lines: with another comment character, `--cleanup=strip`
        // drops lines the hook read as text (the ticket it requires).
        ("core", None, "commentchar" | "commentstring") if !comment_ok(value) => {
            "a comment character other than `#` makes git drop message lines the commit-msg hook read as text"
        }
        // The patch a hook's own `git diff --cached` prints: forced colour
        // puts an escape before each `+`, so `grep '^+.*MARKER'` matched
        // nothing; other prefixes than `a/` `b/` hide `+++ b/path`.
        ("color", _, _) if value.is_some_and(|v| v.trim().eq_ignore_ascii_case("always")) => {
            "forced colour changes the patch the hooks' own git commands print"
        }
        ("diff", None, "noprefix" | "mnemonicprefix" | "srcprefix" | "dstprefix")
            if !is_false(value) && value != Some("\u{0}") =>
        {
            "it changes the patch the hooks' own git commands print"
        }
        // git cuts the message at the scissors line after commit-msg read it.
        ("commit", None, "cleanup")
            if value.is_some_and(|v| v.trim().eq_ignore_ascii_case("scissors")) =>
        {
            "scissors cleanup cuts the message after the commit-msg hook read it"
        }
        ("sequence", None, "editor") => program,
        ("pager", Some(_), _) | ("pager", None, _) if !is_bool(value) => program,
        ("diff", None, "external") => program,
        ("diff", Some(_), "command" | "textconv") => program,
        ("merge", Some(_), "driver") => program,
        ("filter", Some(_), "clean" | "smudge" | "process") => program,
        ("credential", _, "helper") => program,
        ("gpg", _, "program") => program,
        // Round seven: more programs git runs that `-c` could name.
        ("gpg", Some(_), "defaultkeycommand") => program,
        ("trailer", Some(_), "cmd" | "command") => program,
        ("imap", None, "tunnel") => program,
        // A fetch names a commit it already has by id, copies nothing and
        // moves the ref: a local commit no hook saw would count as the
        // remote's, fetched, for the ledger (a46x).
        ("remote", Some(_), "fetch") if value.is_some_and(refspec_by_id) => {
            "a fetch refspec whose source is an object id makes a local commit look fetched"
        }
        // `git-remote-<vcs>`, looked up on PATH.
        ("remote", Some(_), "vcs") => program,
        ("interactive", None, "difffilter") => program,
        ("difftool" | "mergetool" | "browser" | "man", Some(_), "cmd" | "path") => program,
        ("web", None, "browser") => program,
        ("uploadpack", None, "packobjectshook") => program,
        ("sendemail", _, "sendmailcmd" | "smtpserver") => program,
        ("submodule", Some(_), "update") if value.is_some_and(|v| v.starts_with('!')) => program,
        ("hook", _, _) => "hook.* configures hooks outside the trusted directory",
        ("pull", None, "twohead" | "octopus") if !value.is_none_or(strategies_ok) => {
            "a merge strategy other than git's own is a `git-merge-NAME` program of the caller's choosing, whose result git commits without pre-commit"
        }
        ("branch", Some(_), "mergeoptions") if value.is_some_and(merge_options_refused) => {
            "these merge options skip hooks or name a merge strategy program (git merge reads them as if typed)"
        }
        ("init", None, "templatedir") => "a template directory can install other hooks",
        ("remote", Some(_), "push") if value.is_some_and(|v| v.trim_start().starts_with('+')) => {
            "a `+` push refspec forces every push to that remote"
        }
        ("remote", Some(_), "mirror") if !is_false(value) => {
            "a mirror remote force-pushes and deletes on every push"
        }
        ("remote", Some(_), "receivepack" | "uploadpack") => program,
        ("receive", _, _) => "receive.* settings protect a repository that is pushed to",
        ("protocol", Some("ext"), "allow") | ("protocol", None, "allow")
            if !value.is_some_and(|v| v.eq_ignore_ascii_case("never")) =>
        {
            "the ext:: transport runs arbitrary commands"
        }
        _ => return None,
    })
}

/// `core.commentChar` values that keep git's cleanup what hooks expect:
/// `#`, and `auto` (a character no line of the message starts with); the
/// `unset` probe's NUL too.
fn comment_ok(v: Option<&str>) -> bool {
    matches!(v, Some(v) if v == "#" || v == "\u{0}" || v.eq_ignore_ascii_case("auto"))
}

/// git's own merge strategies (one list, which the guest reads too).
pub use sbx_core::GIT_MERGE_STRATEGIES as STRATEGIES;

/// A strategy list as `pull.twohead`/`pull.octopus` hold it (words); the
/// `unset` probe's NUL counts as none.
fn strategies_ok(v: &str) -> bool {
    v == "\u{0}" || v.split_ascii_whitespace().all(|w| STRATEGIES.contains(&w))
}

/// `branch.NAME.mergeOptions`, which git merge splits and parses as its own
/// options: refused when it skips hooks or names a strategy program, or
/// cannot be read the way git reads it.
fn merge_options_refused(v: &str) -> bool {
    if v == "\u{0}" {
        return false;
    }
    let Some(words) = crate::argv::split_cmdline(v.as_bytes()) else {
        return true;
    };
    let Some((_, table)) = crate::options_gen::TABLES
        .iter()
        .find(|(k, _)| *k == "merge")
    else {
        return true;
    };
    let Ok(a) = crate::argv::parse(&words, table, false) else {
        return true;
    };
    crate::policy::skips_hooks(&a)
        || a.values("strategy")
            .any(|s| !STRATEGIES.contains(&&*String::from_utf8_lossy(s.as_encoded_bytes())))
}

/// Sections whose renaming or removal could smuggle in, or drop, a guarded key.
pub fn guarded_section(section: &str) -> bool {
    let s = section.split('.').next().unwrap_or("").to_ascii_lowercase();
    matches!(
        s.as_str(),
        "core"
            | "include"
            | "includeif"
            | "remote"
            | "receive"
            | "pager"
            | "diff"
            | "merge"
            | "filter"
            | "credential"
            | "gpg"
            | "protocol"
            | "hook"
            | "sequence"
            | "difftool"
            | "mergetool"
            | "uploadpack"
            | "submodule"
            | "init"
            | "pull"
            | "branch"
    )
}

/// A repository's configuration as a hook's private view gets it: every
/// key the agent may not set inline dropped (programs git would run,
/// `diff.*.textconv`, includes, the hooks path). A scratch repository's
/// `.git/config` is the agent's: its `diff.x.textconv` with `* diff=x`
/// hid MARKER from the workspace's pre-commit (`git diff --cached`), and
/// the commit was approved (a46). Err: not a configuration git reads.
pub fn view_config(raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut cfg = gix_config::File::from_bytes_no_includes(
        raw,
        gix_config::file::Metadata::from(gix_config::Source::Local),
        Default::default(),
    )
    .map_err(|e| format!("the repository's configuration: {e}"))?;
    let mut gone = Vec::new();
    for (sec, id) in cfg.sections_and_ids() {
        let h = sec.header();
        let name = h.name().to_string();
        let sub = h.subsection_name().map(|s| s.to_string());
        for key in sec.value_names() {
            let full = match &sub {
                Some(sub) => format!("{name}.{sub}.{key}"),
                None => format!("{name}.{key}"),
            };
            let values = sec.values(&key);
            let refused = |v: Option<&str>| refused(&full, v, Via::Inline, &|_| false).is_some();
            if refused(None) && values.is_empty()
                || values.iter().any(|v| refused(Some(&v.to_string())))
            {
                gone.push((id, key));
            }
        }
    }
    for (id, key) in gone {
        if let Some(mut sec) = cfg.section_mut_by_id(id) {
            while sec.remove(&key).is_some() {}
        }
    }
    Ok(cfg.to_bstring().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(k: &str, v: Option<&str>, via: Via) -> bool {
        refused(k, v, via, &|v| v == "/trusted").is_some()
    }

    #[test]
    fn keys() {
        use Via::*;
        assert!(r("core.hooksPath", Some("/dev/null"), Inline));
        assert!(r("CORE.HOOKSPATH", Some("x"), Write));
        assert!(!r("core.hooksPath", Some("/trusted"), Inline));
        assert!(r("include.path", Some("/tmp/x"), Inline));
        assert!(r("includeIf.gitdir:/.path", Some("/tmp/x"), Write));
        assert!(r("alias.ci", Some("commit -n"), Inline));
        assert!(!r("alias.ci", Some("commit"), Write));
        assert!(r("core.fsmonitor", Some("/tmp/evil"), Inline));
        let id = "0123456789abcdef0123456789abcdef01234567";
        assert!(r(
            "remote.origin.fetch",
            Some(&format!("{id}:refs/heads/x")),
            Inline
        ));
        assert!(r(
            "remote.o.fetch",
            Some(&format!("+{id}:refs/remotes/o/x")),
            Write
        ));
        assert!(!r(
            "remote.origin.fetch",
            Some("+refs/heads/*:refs/remotes/origin/*"),
            Inline
        ));
        assert!(!r("core.fsmonitor", Some("false"), Inline));
        assert!(r("core.sshCommand", Some("ssh -i x"), Inline));
        assert!(r(
            "remote.origin.push",
            Some("+refs/heads/*:refs/heads/*"),
            Write
        ));
        assert!(!r("remote.origin.push", Some("refs/heads/main"), Write));
        assert!(r("remote.origin.mirror", None, Inline));
        assert!(!r("remote.origin.mirror", Some("false"), Inline));
        assert!(r("receive.denyNonFastForwards", Some("false"), Write));
        assert!(r("protocol.ext.allow", Some("always"), Inline));
        assert!(r("pager.log", Some("sh -c evil"), Inline));
        assert!(!r("pager.log", Some("false"), Inline));
        assert!(r("diff.foo.textconv", Some("x"), Inline));
        assert!(r("trailer.s.cmd", Some("echo x"), Inline));
        assert!(r("Trailer.s.Command", Some("echo x"), Write));
        assert!(!r("trailer.s.key", Some("Signed-off-by"), Inline));
        assert!(r("gpg.ssh.defaultKeyCommand", Some("x"), Inline));
        assert!(r("imap.tunnel", Some("x"), Write));
        assert!(r("remote.x.vcs", Some("evil"), Inline));
        assert!(r("submodule.a.update", Some("!sh"), Write));
        assert!(!r("submodule.a.update", Some("rebase"), Write));
        assert!(r("color.ui", Some("always"), Inline));
        assert!(r("Color.Diff", Some(" Always"), Write));
        assert!(r("color.diff.new", Some("always"), Inline));
        assert!(!r("color.ui", Some("auto"), Write));
        assert!(!r("color.diff.new", Some("green"), Inline));
        assert!(r("diff.noprefix", None, Inline));
        assert!(r("diff.mnemonicPrefix", Some("true"), Write));
        assert!(r("diff.srcPrefix", Some("x/"), Inline));
        assert!(!r("diff.noprefix", Some("false"), Write));
        assert!(r("core.commentChar", Some("J"), Inline));
        assert!(r("core.commentString", Some("//"), Write));
        assert!(r("CORE.COMMENTCHAR", None, Inline));
        assert!(!r("core.commentChar", Some("#"), Write));
        assert!(!r("core.commentChar", Some("Auto"), Inline));
        assert!(!r("user.name", Some("x"), Write));
        assert!(!r("color.ui", Some("auto"), Inline));
        // Subsection case is kept: `remote.Origin` is its own remote.
        assert_eq!(split("Remote.Origin.URL").unwrap().sub, Some("Origin"));
    }

    /// A view's configuration keeps what hooks read and drops what would
    /// run a program or hide a change from them.
    #[test]
    fn a_views_configuration_runs_no_program() {
        let raw = b"[core]\n\tbare = false\n\tfsmonitor = /tmp/x\n[diff \"hide\"]\n\ttextconv = sh -c true\n\tcommand = /tmp/d\n[diff]\n\texternal = /tmp/e\n\trenames = true\n[include]\n\tpath = /tmp/c\n[user]\n\temail = a@b\n";
        let out = String::from_utf8(super::view_config(raw).unwrap()).unwrap();
        for kept in ["bare = false", "renames = true", "email = a@b"] {
            assert!(out.contains(kept), "{kept}: {out}");
        }
        for gone in ["fsmonitor", "textconv", "/tmp/d", "external", "/tmp/c"] {
            assert!(!out.contains(gone), "{gone}: {out}");
        }
        assert!(super::view_config(b"[core\n").is_err());
    }
}
