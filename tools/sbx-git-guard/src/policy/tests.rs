use super::*;

/// A repository laid out on disk as git would (no git needed to read it).
fn repo(config: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let g = t.path().join(".git");
    for d in ["objects", "refs/heads", "hooks"] {
        std::fs::create_dir_all(g.join(d)).unwrap();
    }
    std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(
        g.join("config"),
        format!("[core]\n\trepositoryformatversion = 0\n\tbare = false\n{config}"),
    )
    .unwrap();
    std::fs::create_dir(t.path().join("sub")).unwrap();
    t
}

const CONFIG: &str = r#"
[alias]
	ci = commit
	cin = commit -n
	nv = commit --no-veri
	chain = cin
	fp = push --force
	sh = !git commit --no-verify
	hp = -c core.hooksPath=/dev/null commit
	p = -p log
	st = status
	loop1 = loop2
	loop2 = loop1
[alias "x"]
	y = commit --no-verify
[alias "Deep.Er"]
	Name = commit -n
[remote "origin"]
	url = /tmp/remote.git
	fetch = +refs/heads/*:refs/remotes/origin/*
[remote "forced"]
	url = /tmp/remote.git
	push = +refs/heads/*:refs/heads/*
[remote "mirror"]
	url = /tmp/remote.git
	mirror = true
[remote "rp"]
	url = /tmp/remote.git
	receivepack = /tmp/evil
[branch "main"]
	remote = origin
"#;

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env { dir: repo(CONFIG) }
    }

    fn decide_in<S: AsRef<str>>(
        &self,
        cwd: &Path,
        args: &[S],
        extra_env: &[(&str, &str)],
    ) -> Result<Allow, Block> {
        let args: Vec<OsString> = args.iter().map(|a| OsString::from(a.as_ref())).collect();
        let mut env: Vec<(OsString, OsString)> = vec![
            ("HOME".into(), self.dir.path().join("home").into()),
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
        ];
        env.extend(
            extra_env
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        let call = Call {
            args: &args,
            cwd,
            env: &env,
            settings: Settings::default(),
        };
        decide(&call, &|_| Some(false))
    }

    fn decide<S: AsRef<str>>(&self, args: &[S]) -> Result<Allow, Block> {
        self.decide_in(self.dir.path(), args, &[])
    }
}

fn words(s: &str) -> Vec<String> {
    shlex::split(s).expect("test lines are shell words")
}

/// Global-option prefixes an attacker may put in front; none may matter.
const PREFIXES: &[&str] = &[
    "",
    "-C .",
    "-C sub",
    "-c user.name=x",
    "--no-pager",
    "-p",
    "--literal-pathspecs",
    "-c color.ui=never -C .",
    "--git-dir=.git",
    "--git-dir .git --work-tree .",
    "--no-optional-locks --no-replace-objects",
];

/// Attacks: (argv after the prefix, rule that must stop it).
const ATTACKS: &[(&str, &str)] = &[
    ("commit --no-verify -m x", "block-no-verify"),
    // The message is cut at the scissors line after commit-msg read it.
    ("commit -v -m x", "block-no-verify"),
    ("commit -qv -m x", "block-no-verify"),
    ("commit --verbose --no-verbose -v -m x", "block-no-verify"),
    ("commit --verb -m x", "block-no-verify"),
    ("commit -e --cleanup=scissors -m x", "block-no-verify"),
    ("commit -e --cleanup scissors -m x", "block-no-verify"),
    ("merge -e --cleanup=scissors feature", "block-no-verify"),
    ("pull --edit --cleanup=scissors", "block-no-verify"),
    (
        "cherry-pick -e --cleanup=scissors feature",
        "block-no-verify",
    ),
    ("-c commit.cleanup=scissors commit -e -m x", "config-inline"),
    ("config commit.cleanup scissors", "config-write"),
    ("commit -n -m x", "block-no-verify"),
    ("commit -nm x", "block-no-verify"),
    ("commit -anm x", "block-no-verify"),
    ("commit -an -m x", "block-no-verify"),
    ("commit -qn -m x", "block-no-verify"),
    ("commit -vnam x", "block-no-verify"),
    ("commit --no-verif -m x", "block-no-verify"),
    ("commit --no-veri -m x", "block-no-verify"),
    ("commit -m x --no-verify", "block-no-verify"),
    ("commit file -n -m x", "block-no-verify"),
    ("commit --verify --no-verify -m x", "block-no-verify"),
    ("commit --amend --no-edit -n", "block-no-verify"),
    ("commit --message=x -n", "block-no-verify"),
    ("commit -F msg -n", "block-no-verify"),
    ("merge --no-verify feature", "block-no-verify"),
    ("merge feature --no-verify", "block-no-verify"),
    ("pull --no-verify", "block-no-verify"),
    ("pull origin main --no-verify", "block-no-verify"),
    ("pull --rebase --no-verify", "block-no-verify"),
    ("rebase --no-verify main", "block-no-verify"),
    ("am --no-verify x.patch", "block-no-verify"),
    ("am -n x.patch", "block-no-verify"),
    ("push --no-verify", "block-no-verify"),
    ("push --no-verify origin main", "block-no-verify"),
    ("ci -n -m x", "block-no-verify"),
    ("cin -m x", "block-no-verify"),
    ("nv -m x", "block-no-verify"),
    ("chain -m x", "block-no-verify"),
    ("CI -n -m x", "block-no-verify"),
    ("push -f", "block-force-push"),
    ("push -f origin main", "block-force-push"),
    ("push origin main -f", "block-force-push"),
    ("push -uf origin main", "block-force-push"),
    ("push -fu origin main", "block-force-push"),
    ("push --force origin main", "block-force-push"),
    ("push --force-with-lease origin main", "block-force-push"),
    (
        "push --force-with-lease=main origin main",
        "block-force-push",
    ),
    ("push --force-w origin main", "block-force-push"),
    ("push --force-with origin main", "block-force-push"),
    (
        "push --force-if-includes --force-with-lease origin main",
        "block-force-push",
    ),
    ("push origin +main", "block-force-push"),
    ("push origin +main:main", "block-force-push"),
    (
        "push origin main +refs/heads/x:refs/heads/x",
        "block-force-push",
    ),
    ("push origin :main", "block-force-push"),
    ("push origin :refs/heads/main", "block-force-push"),
    ("push --mirror origin", "block-force-push"),
    ("push --mir origin", "block-force-push"),
    ("push --delete origin main", "block-force-push"),
    ("push --del origin main", "block-force-push"),
    ("push -d origin main", "block-force-push"),
    ("push --prune origin", "block-force-push"),
    ("push --pru origin", "block-force-push"),
    ("push forced", "block-force-push"),
    ("push mirror", "block-force-push"),
    ("push mirror main", "block-force-push"),
    ("fp origin main", "block-force-push"),
    ("remote add --mirror=push m /tmp/x", "block-force-push"),
    ("push --receive-pack=/tmp/x origin main", "exec-option"),
    ("push --exec=/tmp/x origin main", "exec-option"),
    ("push rp main", "exec-option"),
    ("fetch --upload-pack=/tmp/x origin", "exec-option"),
    ("pull --upload-pack=/tmp/x origin", "exec-option"),
    ("clone -u /tmp/x /tmp/r /tmp/c", "exec-option"),
    ("clone --upload-pack /tmp/x /tmp/r /tmp/c", "exec-option"),
    ("ls-remote --upload-pack=/tmp/x origin", "exec-option"),
    ("archive --remote=origin --exec=/tmp/x HEAD", "exec-option"),
    ("rebase -x true main", "exec-option"),
    ("rebase -xtrue main", "exec-option"),
    ("rebase --exec=true main", "exec-option"),
    ("rebase --exe true main", "exec-option"),
    ("rebase -i -x true main", "exec-option"),
    ("submodule foreach true", "exec-option"),
    ("submodule --quiet foreach true", "exec-option"),
    ("bisect run true", "exec-option"),
    ("difftool -x true", "exec-option"),
    ("difftool --extcmd=true", "exec-option"),
    ("sh", "exec-option"),
    ("-c core.hooksPath=/dev/null commit -m x", "config-inline"),
    ("-c core.hookspath=/tmp commit -m x", "config-inline"),
    ("-c CORE.HOOKSPATH=/tmp commit -m x", "config-inline"),
    ("-c include.path=/tmp/x status", "config-inline"),
    ("-c includeIf.gitdir:/.path=/tmp/x status", "config-inline"),
    ("-c alias.x=commit x", "config-inline"),
    ("-c core.fsmonitor=/tmp/x status", "config-inline"),
    ("-c core.editor=true commit", "config-inline"),
    ("-c core.pager=sh log", "config-inline"),
    ("-c core.sshCommand=sh fetch", "config-inline"),
    ("-c sequence.editor=true rebase -i main", "config-inline"),
    ("-c diff.external=sh diff", "config-inline"),
    ("-c credential.helper=sh fetch", "config-inline"),
    ("-c gpg.program=sh commit -S -m x", "config-inline"),
    ("-c remote.origin.mirror=true push", "config-inline"),
    (
        "-c remote.origin.push=+refs/heads/*:refs/heads/* push",
        "config-inline",
    ),
    ("-c init.templateDir=/tmp init /tmp/n", "config-inline"),
    ("-c protocol.ext.allow=always fetch", "config-inline"),
    ("-c receive.denyNonFastForwards=false push", "config-inline"),
    ("hp -m x", "config-inline"),
    (
        "clone -c core.hooksPath=/tmp /tmp/r /tmp/c",
        "config-inline",
    ),
    (
        "clone --config=core.fsmonitor=/tmp/x /tmp/r /tmp/c",
        "config-inline",
    ),
    ("config core.hooksPath /dev/null", "config-write"),
    ("config core.hooksPath .git/hooks2", "config-write"),
    ("config --local core.hooksPath /tmp", "config-write"),
    ("config set core.hooksPath /tmp", "config-write"),
    ("config --add include.path /tmp/x", "config-write"),
    ("config includeIf.gitdir:/.path /tmp/x", "config-write"),
    ("config core.fsmonitor /tmp/x", "config-write"),
    ("config core.editor true", "config-write"),
    (
        "config remote.origin.push +refs/heads/*:refs/heads/*",
        "config-write",
    ),
    ("config remote.origin.mirror true", "config-write"),
    ("config --bool remote.origin.mirror true", "config-write"),
    ("config set remote.origin.mirror true", "config-write"),
    ("config receive.denyNonFastForwards false", "config-write"),
    ("config --unset receive.denyDeletes", "config-write"),
    ("config unset receive.denyDeletes", "config-write"),
    ("config --edit", "config-write"),
    ("config edit", "config-write"),
    ("config -e", "config-write"),
    ("config --rename-section foo core", "config-write"),
    ("config --remove-section include", "config-write"),
    ("config -f .git/config core.hooksPath /tmp", "config-write"),
    ("config --global user.name x", "block-global-config"),
    ("config --glob user.name x", "block-global-config"),
    ("config --system user.name x", "block-global-config"),
    ("config set --global user.name x", "block-global-config"),
    ("config --global --unset user.name", "block-global-config"),
    ("config --global --edit", "block-global-config"),
    ("commit-tree HEAD^{tree} -m x", "plumbing"),
    ("fast-import", "plumbing"),
    ("send-pack /tmp/r main", "plumbing"),
    ("send-pack /tmp/r main -- --stateless-rpc", "plumbing"),
    // Options or refspecs git-remote-http never passes: force or delete.
    (
        "send-pack --stateless-rpc --force http://h/r.git/ --stdin",
        "block-force-push",
    ),
    (
        "send-pack --stateless-rpc --mirror http://h/r.git/",
        "block-force-push",
    ),
    (
        "send-pack --stateless-rpc http://h/r.git/ +main:main",
        "block-force-push",
    ),
    (
        "send-pack --stateless-rpc http://h/r.git/ :main",
        "block-force-push",
    ),
    (
        "send-pack --stateless-rpc --force-with-lease http://h/r.git/ --stdin",
        "block-force-push",
    ),
    ("http-push --force http://h/r.git/ main", "block-force-push"),
    ("http-push -D http://h/r.git/ main", "block-force-push"),
    ("http-push -d http://h/r.git/ main", "block-force-push"),
    ("http-push http://h/r.git/ +main:main", "block-force-push"),
    ("http-push http://h/r.git/ :main", "block-force-push"),
    ("filter-branch --tree-filter true", "plumbing"),
    ("filter-repo --force", "plumbing"),
    ("replace HEAD HEAD~1", "plumbing"),
    ("replace --graft HEAD", "plumbing"),
    ("replace --edit HEAD", "plumbing"),
    ("stash store abc", "plumbing"),
    ("update-ref refs/heads/main HEAD~1", "plumbing"),
    ("update-ref HEAD HEAD~1", "plumbing"),
    ("update-ref --no-deref HEAD HEAD~1", "plumbing"),
    ("update-ref --stdin", "plumbing"),
    ("--exec-path=/tmp status", "config-env"),
    ("init --template=/tmp /tmp/n", "config-env"),
    ("clone --template=/tmp /tmp/r /tmp/c", "config-env"),
    ("--work-tree=.git checkout HEAD -- hooks", "git-dir"),
    ("--work-tree=.git/hooks status", "git-dir"),
    ("worktree add .git/hooks/x", "git-dir"),
    ("worktree add -b b .git/x", "git-dir"),
    ("checkout-index -a --prefix=.git/hooks/", "git-dir"),
    ("checkout-index -a --prefix=.git/", "git-dir"),
    ("read-tree --prefix=.git/ HEAD", "git-dir"),
    ("clone /tmp/r .git/hooks", "git-dir"),
    ("init .git/x", "git-dir"),
    ("archive -o .git/hooks/x HEAD", "output-path"),
    // Aliases with dots, inline push targets, bare --mirror, outputs,
    // history plumbing.
    ("x.y -m m", "block-no-verify"),
    ("X.Y -m m", "block-no-verify"),
    ("deep.er.name -m m", "block-no-verify"),
    ("-c remote.pushDefault=mirror push", "block-force-push"),
    ("-c branch.main.pushRemote=forced push", "block-force-push"),
    ("-c branch.main.pushRemote=mirror push", "block-force-push"),
    ("remote add --mirror evil /tmp/x", "block-force-push"),
    ("remote add --mirror=push evil /tmp/x", "block-force-push"),
    ("log -1 --output=.git/hooks/pre-commit", "output-path"),
    ("log -1 --output .git/hooks/pre-commit", "output-path"),
    ("show --outp=.git/hooks/pre-commit", "output-path"),
    ("diff --output=.git/config", "output-path"),
    ("format-patch -1 -o .git/hooks", "output-path"),
    ("format-patch -1 -o.git/hooks", "output-path"),
    (
        "format-patch -1 --output-directory .git/hooks",
        "output-path",
    ),
    ("bundle create .git/hooks/pre-commit HEAD", "output-path"),
    ("config -f .git/hooks/pre-commit a.b c", "output-path"),
    (
        "fast-export --export-marks=.git/hooks/pre-commit HEAD",
        "output-path",
    ),
    ("replay --onto main topic", "plumbing"),
    ("hash-object -t commit -w --stdin", "plumbing"),
    ("grep -Ovim x", "exec-option"),
    ("-C sub worktree add ../.git/x", "git-dir"),
    (
        "-C sub checkout-index -a --prefix=../.git/hooks/",
        "git-dir",
    ),
    ("-C .git/hooks status", "git-dir"),
    ("--bogus status", "parse-error"),
    ("--git-d=.git status", "parse-error"),
    ("commit --bogus", "parse-error"),
    ("commit --no-v -m x", "parse-error"),
    // Ambiguous to git too: --no-verbose or --no-verify.
    ("commit --no-ver -m x", "parse-error"),
    ("commit --no-ve -m x", "parse-error"),
    // --no-verify-signatures or --no-verify.
    ("merge --no-veri feature", "parse-error"),
    ("merge --no-verif feature", "parse-error"),
    ("commit -m", "parse-error"),
    ("push --fo", "parse-error"),
    ("push --forc origin main", "parse-error"),
    ("loop1", "parse-error"),
];

/// Honest use: must run.
const ALLOWED: &[&str] = &[
    "status",
    // git-remote-http(s)'s half of a push (git push ran pre-push already).
    "send-pack --stateless-rpc --helper-status --thin --progress http://h/r.git/ --stdin",
    "send-pack --stateless-rpc --helper-status --thin --no-progress --dry-run --atomic --push-option=x http://h/r.git/ --stdin",
    // A WebDAV push as git-remote-http runs it.
    "http-push --helper-status --dry-run http://h/r.git/ main:main",
    "status --short",
    "commit -m x",
    "commit -v --no-verbose -m x",
    "commit --cleanup=strip -m x",
    "commit -m --no-verify",
    "commit -m -n",
    "commit -m=-n",
    "commit --message=--no-verify",
    "commit -F msg",
    "commit -uno -m x",
    "commit -u no -m x",
    "commit -am x",
    "commit -m x -- -n",
    "commit --amend --no-edit",
    "commit --verify -m x",
    "commit --no-verify --verify -m x",
    "commit --fixup=HEAD",
    "commit -S -m x",
    "commit -h",
    "commit --help",
    "ci -m x",
    "push",
    "push -n",
    "push --dry-run",
    "push origin feature",
    "push -u origin feature",
    "push --set-upstream origin feature",
    "push origin main:main",
    "push origin refs/heads/a:refs/heads/b",
    "push origin :",
    "push --tags",
    "push --follow-tags origin main",
    "push --no-force-with-lease origin main",
    "push -o ci.skip origin main",
    "push --atomic origin a b",
    "merge -n feature",
    "merge --no-stat feature",
    "merge --no-ff feature",
    "merge --verify feature",
    "pull",
    "pull --rebase",
    "pull --no-stat",
    "pull -n",
    "rebase -n main",
    "rebase -i main",
    "rebase --continue",
    "rebase main",
    "am x.patch",
    "cherry-pick -n HEAD~1",
    "cherry-pick -x HEAD~1",
    "revert -n HEAD",
    "log -n 5",
    "log -n5 --oneline",
    "log --no-walk",
    "-p log",
    "p",
    "st",
    "diff --stat",
    "show HEAD",
    "config user.name X",
    "config user.email x@y",
    "config --local user.name X",
    "config set user.name X",
    "config --get user.name",
    "config get user.name",
    "config -l",
    "config --list --show-origin",
    "config list",
    "config --global --get user.name",
    "config --global -l",
    "config alias.st status",
    "config alias.ci 'commit -v'",
    "config core.hooksPath .git/hooks",
    "config remote.origin.push refs/heads/main",
    "config remote.origin.mirror false",
    "config core.fsmonitor false",
    "config pager.log false",
    "config --unset user.name",
    "config --unset core.hooksPath",
    "config --rename-section foo bar",
    "-C sub status",
    "-C . log",
    "-c color.ui=never status",
    "-c user.name=x commit -m x",
    "-c core.hooksPath=.git/hooks commit -m x",
    "--no-pager log",
    "stash",
    "stash push -m create",
    "stash -m store",
    "stash pop",
    "stash list",
    "stash show -p",
    "worktree add ../wt",
    "worktree add -b b ../wt main",
    "worktree list",
    "branch -d x",
    "branch -D x",
    "tag v1",
    "fetch",
    "fetch --prune origin",
    "fetch origin",
    "ls-remote -h origin",
    "clone /tmp/r /tmp/c",
    "clone --depth 1 /tmp/r /tmp/c",
    "init /tmp/n",
    "update-ref -d refs/heads/x",
    "update-ref refs/tags/x HEAD",
    "update-ref refs/notes/x HEAD",
    "replace -l",
    "replace --list",
    "replace -d abc",
    "replace",
    "submodule update --init",
    "submodule status",
    "bisect start",
    "bisect good",
    "difftool --tool=vimdiff",
    "checkout-index -a --prefix=/tmp/export/",
    "read-tree --prefix=vendor/ HEAD",
    "archive -o /tmp/x.tar HEAD",
    "remote add up /tmp/r",
    "remote -v",
    "remote add --mirror=fetch m /tmp/r",
    "version",
    "--version",
    "--help",
    "help commit",
    "--exec-path",
    "--list-cmds=main",
    "lfs pull",
    "",
];

#[test]
fn every_attack_in_every_spelling_is_blocked() {
    let env = Env::new();
    let mut n = 0;
    let mut wrong = Vec::new();
    for prefix in PREFIXES {
        for (attack, rule) in ATTACKS {
            // Relative paths in these name the git dir from the top only (and a
            // relative --git-dir followed by -C names another repository).
            if (*rule == "git-dir" || *rule == "output-path")
                && (prefix.contains("-C sub")
                    || (attack.starts_with("-C") && prefix.contains("--git-dir")))
            {
                continue;
            }
            let line = format!("{prefix} {attack}");
            match env.decide(&words(&line)) {
                Ok(a) => wrong.push(format!("allowed: git {line} -> {:?}", a.args)),
                Err(b) if b.rule != *rule => wrong.push(format!(
                    "git {line}: {} ({}), want {rule}",
                    b.rule, b.reason
                )),
                Err(_) => {}
            }
            n += 1;
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(n > 1000, "{n} cases");
}

/// `stash create` (git merge runs it) is let through only as a recorded
/// run, in every spelling that reaches it; anything else is not recorded.
#[test]
fn stash_create_runs_only_recorded() {
    let env = Env::new();
    for prefix in PREFIXES {
        for line in ["stash create", "stash create msg", "stash list"] {
            let line = format!("{prefix} {line}");
            let a = env
                .decide(&words(&line))
                .unwrap_or_else(|b| panic!("{line}: {b:?}"));
            assert_eq!(a.records_stash, line.contains("create"), "git {line}");
        }
    }
}

/// The sequencer's `git commit -n ...` (GIT_REFLOG_ACTION set) runs with
/// `--verify` last, so the hooks run; without that variable, or with a `--`
/// after which `--verify` would be a path, -n is refused as always.
#[test]
fn a_sequencer_commit_runs_its_hooks() {
    let env = Env::new();
    let seq = [("GIT_REFLOG_ACTION", "rebase (continue)")];
    let line = words("commit -n --amend --no-gpg-sign -F m -e --allow-empty");
    let a = env
        .decide_in(env.dir.path(), &line, &seq)
        .unwrap_or_else(|b| panic!("{b:?}"));
    assert_eq!(
        a.args.last().map(|a| a.as_os_str()),
        Some(OsStr::new("--verify"))
    );
    for (line, extra) in [
        ("commit -n --amend -F m", &[][..]),
        ("commit -nm x -- a", &seq[..]),
        ("commit --no-verif -m x -- --verify", &seq[..]),
        ("commit -nm x --end-of-options a", &seq[..]),
    ] {
        let r = env.decide_in(env.dir.path(), &words(line), extra);
        assert!(
            r.as_ref().is_err_and(|b| b.rule == "block-no-verify"),
            "{line}: {r:?}"
        );
    }
    // Honest commits get nothing appended.
    let a = env
        .decide_in(env.dir.path(), &words("commit -m x"), &seq)
        .unwrap_or_else(|b| panic!("{b:?}"));
    assert_eq!(a.args.last().map(|a| a.as_os_str()), Some(OsStr::new("x")));
}

#[test]
fn honest_use_is_never_blocked() {
    let env = Env::new();
    let mut wrong = Vec::new();
    for prefix in PREFIXES {
        for ok in ALLOWED {
            let line = format!("{prefix} {ok}");
            if let Err(b) = env.decide(&words(&line)) {
                wrong.push(format!("blocked: git {line}: {} {}", b.rule, b.reason));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn hooks_are_pinned_as_the_last_global_option() {
    let env = Env::new();
    let hooks = env.dir.path().canonicalize().unwrap().join(".git/hooks");
    let a = env
        .decide(&["-C", "sub", "-c", "a.b=c", "commit", "-m", "x"])
        .unwrap();
    let want: Vec<OsString> = [
        "-C",
        "sub",
        "-c",
        "a.b=c",
        "-c",
        "core.commentChar=#",
        "-c",
        "core.commitGraph=false",
        "-c",
    ]
    .iter()
    .map(OsString::from)
    .chain([OsString::from(format!(
        "core.hooksPath={}",
        hooks.display()
    ))])
    .chain(
        ["commit", "--no-verbose", "-m", "x"]
            .iter()
            .map(OsString::from),
    )
    .collect();
    assert_eq!(a.args, want);
    // Outside a repository there are no hooks to pin; the commit-graph
    // stays off (round eight).
    let out = tempfile::tempdir().unwrap();
    let a = env.decide_in(out.path(), &["init", "x"], &[]).unwrap();
    assert_eq!(
        a.args,
        ["-c", "core.commitGraph=false", "init", "x"].map(OsString::from)
    );
}

#[test]
fn husky_repositories_pin_husky_and_allow_its_install() {
    let env = Env::new();
    let root = env.dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join(".husky/_")).unwrap();
    std::fs::write(root.join(".husky/_/h"), "").unwrap();
    let a = env.decide(&["status"]).unwrap();
    assert_eq!(
        a.args[3],
        OsString::from(format!(
            "core.hooksPath={}",
            root.join(".husky/_").display()
        ))
    );
    env.decide(&["config", "core.hooksPath", ".husky/_"])
        .unwrap();
    assert_eq!(
        env.decide(&["config", "core.hooksPath", ".husky"])
            .unwrap_err()
            .rule,
        "config-write"
    );
}

#[test]
fn environment_routes_are_checked_like_options() {
    let env = Env::new();
    let d = env.dir.path();
    let e = |vars: &[(&str, &str)]| env.decide_in(d, &["status"], vars);
    for (vars, rule) in [
        (&[("GIT_CONFIG_GLOBAL", "/tmp/x")][..], "config-env"),
        (&[("GIT_CONFIG_SYSTEM", "/tmp/x")][..], "config-env"),
        (&[("GIT_CONFIG", "/tmp/x")][..], "config-env"),
        (&[("GIT_EXEC_PATH", "/tmp")][..], "config-env"),
        (&[("GIT_TEMPLATE_DIR", "/tmp")][..], "config-env"),
        (
            &[
                ("GIT_CONFIG_COUNT", "1"),
                ("GIT_CONFIG_KEY_0", "core.fsmonitor"),
                ("GIT_CONFIG_VALUE_0", "/x"),
            ][..],
            "config-inline",
        ),
        (&[("GIT_CONFIG_COUNT", "1")][..], "parse-error"),
        (&[("GIT_CONFIG_COUNT", "x")][..], "parse-error"),
        (
            &[("GIT_CONFIG_PARAMETERS", "'include.path'='/tmp/x'")][..],
            "config-inline",
        ),
        (
            &[("GIT_CONFIG_PARAMETERS", "'alias.x=commit -n'")][..],
            "config-inline",
        ),
        (&[("GIT_CONFIG_PARAMETERS", "'broken")][..], "parse-error"),
    ] {
        assert_eq!(e(vars).unwrap_err().rule, rule, "{vars:?}");
    }
    // git exports our own pin to its children: their `git` calls still run.
    e(&[(
        "GIT_CONFIG_PARAMETERS",
        "'core.hookspath'='/elsewhere' 'color.ui'='never'",
    )])
    .unwrap();
    e(&[
        ("GIT_CONFIG_COUNT", "1"),
        ("GIT_CONFIG_KEY_0", "user.name"),
        ("GIT_CONFIG_VALUE_0", "x"),
    ])
    .unwrap();
    // --config-env reads the named variable.
    let b = env.decide_in(
        d,
        &["--config-env=core.hooksPath=EVIL", "status"],
        &[("EVIL", "/dev/null")],
    );
    assert_eq!(b.unwrap_err().rule, "config-inline");
    let b = env.decide_in(d, &["--config-env=core.hooksPath=NOPE", "status"], &[]);
    assert_eq!(b.unwrap_err().rule, "parse-error");
    // Kill switches are removed, the rest kept.
    let a = env
        .decide_in(
            d,
            &["status"],
            &[
                ("HUSKY", "0"),
                ("SKIP", "lint"),
                ("LEFTHOOK", "0"),
                ("KEEP", "1"),
            ],
        )
        .unwrap();
    let names: Vec<_> = a
        .env
        .iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    assert!(names.contains(&"KEEP".into()));
    for k in STRIPPED_ENV {
        // Or set to the guard's own value (replace refs and grafts off).
        let forced = crate::hookenv::FORCED.iter().find(|(f, _)| f == k);
        let got = a.env.iter().find(|(n, _)| n == k);
        match (forced, got) {
            (Some((_, v)), Some((_, g))) => assert_eq!(g, v, "{k}"),
            _ => assert!(got.is_none(), "{k}"),
        }
    }
}

#[test]
fn inside_the_git_dir_is_refused() {
    let env = Env::new();
    let g = env.dir.path().join(".git/hooks");
    assert_eq!(
        env.decide_in(&g, &["status"], &[]).unwrap_err().rule,
        "git-dir"
    );
    let g = env.dir.path().join(".git");
    assert_eq!(
        env.decide_in(&g, &["log"], &[]).unwrap_err().rule,
        "git-dir"
    );
    // A bare repository is its own git dir and is fine.
    let bare = tempfile::tempdir().unwrap();
    for d in ["objects", "refs", "hooks"] {
        std::fs::create_dir(bare.path().join(d)).unwrap();
    }
    std::fs::write(bare.path().join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(bare.path().join("config"), "[core]\n\tbare = true\n").unwrap();
    env.decide_in(bare.path(), &["log"], &[]).unwrap();
}

#[test]
fn husky_kill_files_and_dirty_husky_block_commits() {
    let env = Env::new();
    let home = env.dir.path().join("home");
    std::fs::create_dir_all(home.join(".config/husky")).unwrap();
    std::fs::write(home.join(".config/husky/init.sh"), "").unwrap();
    env.decide(&["commit", "-m", "x"]).unwrap();
    std::fs::write(home.join(".config/husky/init.sh"), "export HUSKY=0\n").unwrap();
    assert_eq!(
        env.decide(&["commit", "-m", "x"]).unwrap_err().rule,
        "husky"
    );
    assert_eq!(env.decide(&["ci", "-m", "x"]).unwrap_err().rule, "husky");
    env.decide(&["status"]).unwrap();
    std::fs::remove_file(home.join(".config/husky/init.sh")).unwrap();
    std::fs::write(home.join(".huskyrc"), "HUSKY=0\n").unwrap();
    assert_eq!(env.decide(&["merge", "x"]).unwrap_err().rule, "husky");
    std::fs::remove_file(home.join(".huskyrc")).unwrap();
    // A dirty .husky, as the real git would report it.
    std::fs::create_dir(env.dir.path().join(".husky")).unwrap();
    let args: Vec<OsString> = ["commit", "-m", "x"].iter().map(OsString::from).collect();
    let e: Vec<(OsString, OsString)> = vec![("HOME".into(), home.into())];
    let call = Call {
        args: &args,
        cwd: env.dir.path(),
        env: &e,
        settings: Settings::default(),
    };
    assert_eq!(decide(&call, &|_| Some(true)).unwrap_err().rule, "husky");
    decide(&call, &|_| Some(false)).unwrap();
}

#[test]
fn settings_switch_their_rules_off() {
    let env = Env::new();
    let args: Vec<OsString> = ["push", "-f", "origin", "main"]
        .iter()
        .map(OsString::from)
        .collect();
    let e: Vec<(OsString, OsString)> = vec![];
    let mut call = Call {
        args: &args,
        cwd: env.dir.path(),
        env: &e,
        settings: Settings::default(),
    };
    assert!(decide(&call, &|_| None).is_err());
    call.settings.block_force_push = false;
    decide(&call, &|_| None).unwrap();
}

#[test]
fn stored_config_with_includes_is_read() {
    let env = Env::new();
    let inc = env.dir.path().join("inc.conf");
    std::fs::write(&inc, "[alias]\n\tsneaky = commit --no-verify\n").unwrap();
    let cfg = env.dir.path().join(".git/config");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!("[include]\n\tpath = {}\n", inc.display()));
    text.push_str(&format!(
        "[includeIf \"gitdir:{}/\"]\n\tpath = inc2.conf\n",
        env.dir.path().display()
    ));
    std::fs::write(&cfg, text).unwrap();
    std::fs::write(
        env.dir.path().join(".git/inc2.conf"),
        "[alias]\n\tcond = push --force\n",
    )
    .unwrap();
    assert_eq!(
        env.decide(&["sneaky", "-m", "x"]).unwrap_err().rule,
        "block-no-verify"
    );
    assert_eq!(env.decide(&["cond"]).unwrap_err().rule, "block-force-push");
    // Global config under HOME counts too.
    let home = env.dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".gitconfig"), "[alias]\n\tg = commit -n\n").unwrap();
    assert_eq!(
        env.decide(&["g", "-m", "x"]).unwrap_err().rule,
        "block-no-verify"
    );
}

#[test]
fn legacy_remotes_files_are_read_for_push() {
    let env = Env::new();
    let dir = env.dir.path().join(".git/remotes");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("legacy"),
        "URL: /tmp/remote.git\nPush: +refs/heads/main:refs/heads/main\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("plain"),
        "URL: /tmp/remote.git\nPush: refs/heads/main:refs/heads/main\n",
    )
    .unwrap();
    let b = env.decide(&["push", "legacy"]).unwrap_err();
    assert_eq!(b.rule, "block-force-push", "{}", b.reason);
    let b = env
        .decide(&["-c", "remote.pushDefault=legacy", "push"])
        .unwrap_err();
    assert_eq!(b.rule, "block-force-push", "{}", b.reason);
    env.decide(&["push", "plain"]).unwrap();
}

#[test]
fn sandbox_ignores_sbx_real_git() {
    let env = vec![(
        OsString::from("SBX_REAL_GIT"),
        OsString::from("/tmp/evil-git"),
    )];
    assert_eq!(
        crate::real_git(&env, false),
        Some(PathBuf::from("/tmp/evil-git"))
    );
    assert_ne!(
        crate::real_git(&env, true),
        Some(PathBuf::from("/tmp/evil-git"))
    );
}

/// What a hook's own git prints does not follow a config file written by
/// hand: diff commands get git's usual patch options, plumbing the default
/// big-file threshold, and history commands `#` for comments.
#[test]
fn hook_views_are_pinned_to_gits_defaults() {
    let env = Env::new();
    let args = |line: &str| -> Vec<String> {
        let a = env.decide(&words(line)).unwrap();
        a.args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    };
    let a = args("diff --cached");
    let at = a.iter().position(|w| w == "diff").unwrap();
    assert_eq!(a[at + 1..at + 5], *DIFF_PINS, "{a:?}");
    assert!(
        a[..at]
            .windows(2)
            .any(|w| w == ["-c", "core.bigFileThreshold=512m"]),
        "{a:?}"
    );
    assert!(
        a[at - 1].starts_with("core.hooksPath="),
        "hooks pin last: {a:?}"
    );
    // `git CMD --help` is git's man page only with --help first.
    for line in ["diff --help", "commit --help", "log --help"] {
        let a = args(line);
        assert_eq!(
            a[a.len() - 2..],
            line.split(' ').collect::<Vec<_>>(),
            "{a:?}"
        );
    }
    let a = args("diff-index -p --cached HEAD");
    assert!(
        a.windows(2)
            .any(|w| w == ["-c", "core.bigFileThreshold=512m"]),
        "{a:?}"
    );
    let a = args("commit -m x");
    let at = a.iter().position(|w| w == "commit").unwrap();
    assert!(
        a[..at]
            .windows(2)
            .any(|w| w == ["-c", "core.commentChar=#"]),
        "{a:?}"
    );
    assert_eq!(a[at + 1], "--no-verbose", "{a:?}");
    assert!(
        a[at - 1].starts_with("core.hooksPath="),
        "hooks pin last: {a:?}"
    );
}

/// A fetch or pull counts as fetched (no ledger check) only from a remote
/// and by ref name: an option's separate value hides no local source, and
/// a refspec naming an object id makes a local commit nothing "fetched".
#[test]
fn only_a_remote_fetched_by_name_is_fetched() {
    let f = |cmd: &str, a: &[&str]| {
        let a: Vec<OsString> = a.iter().map(OsString::from).collect();
        fetches_from_remote(cmd, &a)
    };
    let c = "0123456789abcdef0123456789abcdef01234567";
    assert!(f("fetch", &[]));
    assert!(f("fetch", &["origin"]));
    assert!(f("fetch", &["--depth", "1", "origin", "main:refs/heads/x"]));
    assert!(f("pull", &["--ff-only", "origin", "main"]));
    assert!(!f("fetch", &["."]));
    assert!(!f("fetch", &["--depth", "1", ".", "main:refs/heads/x"]));
    assert!(!f("fetch", &["-j", "2", "/tmp/r"]));
    assert!(!f("fetch", &["origin", &format!("{c}:refs/heads/x")]));
    assert!(!f(
        "fetch",
        &["origin", &format!("+{c}:refs/remotes/origin/x")]
    ));
    assert!(!f("pull", &["origin", c]));
    assert!(!f("fetch", &["--no-such-option", "origin"]));
    assert!(!f("fetch", &["--stdin", "origin"]));
}
