use super::*;
use crate::options_gen::TABLES;

fn t(key: &str) -> &'static [Opt] {
    TABLES.iter().find(|(k, _)| *k == key).unwrap().1
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

fn p(key: &str, v: &[&str]) -> Result<Args, ParseError> {
    parse(&os(v), t(key), false)
}

/// (command, argv, option expected set (name, negated, value)).
#[test]
fn parse_options_like_git() {
    type Case<'a> = (
        &'a str,
        &'a [&'a str],
        &'a [(&'a str, bool, Option<&'a str>)],
        &'a [&'a str],
    );
    let cases: &[Case] = &[
        (
            "commit",
            &["-m", "x"],
            &[("message", false, Some("x"))],
            &[],
        ),
        ("commit", &["-mx"], &[("message", false, Some("x"))], &[]),
        (
            "commit",
            &["--message=x"],
            &[("message", false, Some("x"))],
            &[],
        ),
        (
            "commit",
            &["--message", "x"],
            &[("message", false, Some("x"))],
            &[],
        ),
        (
            "commit",
            &["--mess", "x"],
            &[("message", false, Some("x"))],
            &[],
        ),
        (
            "commit",
            &["-m", "-n"],
            &[("message", false, Some("-n"))],
            &[],
        ),
        (
            "commit",
            &["-m", "--no-verify"],
            &[("message", false, Some("--no-verify"))],
            &[],
        ),
        (
            "commit",
            &["-anm", "msg"],
            &[
                ("all", false, None),
                ("no-verify", false, None),
                ("message", false, Some("msg")),
            ],
            &[],
        ),
        ("commit", &["-n"], &[("no-verify", false, None)], &[]),
        (
            "commit",
            &["--no-verify"],
            &[("no-verify", false, None)],
            &[],
        ),
        ("commit", &["--no-veri"], &[("no-verify", false, None)], &[]),
        ("commit", &["--verify"], &[("no-verify", true, None)], &[]),
        (
            "commit",
            &["--no-no-verify"],
            &[("no-verify", true, None)],
            &[],
        ),
        (
            "commit",
            &["-uno"],
            &[("untracked-files", false, Some("no"))],
            &[],
        ),
        ("commit", &["-u"], &[("untracked-files", false, None)], &[]),
        (
            "commit",
            &["-u", "no"],
            &[("untracked-files", false, None)],
            &["no"],
        ),
        (
            "commit",
            &["-Skey"],
            &[("gpg-sign", false, Some("key"))],
            &[],
        ),
        (
            "commit",
            &["file", "-n"],
            &[("no-verify", false, None)],
            &["file"],
        ),
        ("commit", &["--", "-n"], &[], &["-n"]),
        ("commit", &["--end-of-options", "-n"], &[], &["-n"]),
        (
            "commit",
            &["-C", "HEAD"],
            &[("reuse-message", false, Some("HEAD"))],
            &[],
        ),
        (
            "commit",
            &["--fixup=amend:HEAD"],
            &[("fixup", false, Some("amend:HEAD"))],
            &[],
        ),
        ("commit", &["--no-edit"], &[("edit", true, None)], &[]),
        (
            "commit",
            &["-qn"],
            &[("quiet", false, None), ("no-verify", false, None)],
            &[],
        ),
        ("push", &["-n"], &[("dry-run", false, None)], &[]),
        ("push", &["-f"], &[("force", false, None)], &[]),
        (
            "push",
            &["--force-w"],
            &[("force-with-lease", false, None)],
            &[],
        ),
        (
            "push",
            &["--force-with-lease=main:abc"],
            &[("force-with-lease", false, Some("main:abc"))],
            &[],
        ),
        ("push", &["--mir"], &[("mirror", false, None)], &[]),
        ("push", &["--del"], &[("delete", false, None)], &[]),
        (
            "push",
            &["-d", "origin", "x"],
            &[("delete", false, None)],
            &["origin", "x"],
        ),
        (
            "push",
            &["-u", "origin", "feature"],
            &[("set-upstream", false, None)],
            &["origin", "feature"],
        ),
        (
            "push",
            &["origin", "main", "--force"],
            &[("force", false, None)],
            &["origin", "main"],
        ),
        (
            "push",
            &["--no-force-with-lease"],
            &[("force-with-lease", true, None)],
            &[],
        ),
        ("push", &["--no-force"], &[("force", true, None)], &[]),
        (
            "push",
            &["--receive-pack=x"],
            &[("receive-pack", false, Some("x"))],
            &[],
        ),
        ("push", &["--exec", "x"], &[("exec", false, Some("x"))], &[]),
        (
            "push",
            &["-o", "ci.skip"],
            &[("push-option", false, Some("ci.skip"))],
            &[],
        ),
        ("merge", &["-n"], &[("-n", false, None)], &[]),
        (
            "merge",
            &["--no-verify"],
            &[("no-verify", false, None)],
            &[],
        ),
        ("merge", &["--no-stat"], &[("stat", true, None)], &[]),
        ("pull", &["--no-verify"], &[("verify", true, None)], &[]),
        ("pull", &["--verify"], &[("verify", false, None)], &[]),
        ("rebase", &["-n"], &[("no-stat", false, None)], &[]),
        (
            "rebase",
            &["-x", "make"],
            &[("exec", false, Some("make"))],
            &[],
        ),
        ("rebase", &["-xmake"], &[("exec", false, Some("make"))], &[]),
        (
            "rebase",
            &["--exec=make"],
            &[("exec", false, Some("make"))],
            &[],
        ),
        (
            "rebase",
            &["-i", "HEAD~2"],
            &[("interactive", false, None)],
            &["HEAD~2"],
        ),
        ("am", &["-n"], &[("no-verify", false, None)], &[]),
        (
            "config",
            &["--global", "user.name", "x"],
            &[("global", false, None)],
            &["user.name", "x"],
        ),
        (
            "config",
            &["--glob", "user.name", "x"],
            &[("global", false, None)],
            &["user.name", "x"],
        ),
        (
            "config",
            &["-f", "x", "a.b", "c"],
            &[("file", false, Some("x"))],
            &["a.b", "c"],
        ),
        (
            "update-ref",
            &["-d", "refs/heads/x"],
            &[("-d", false, None)],
            &["refs/heads/x"],
        ),
        (
            "difftool",
            &["-x", "cmd"],
            &[("extcmd", false, Some("cmd"))],
            &[],
        ),
        (
            "clone",
            &["-u", "x", "url"],
            &[("upload-pack", false, Some("x"))],
            &["url"],
        ),
        (
            "clone",
            &["-c", "a.b=c", "url"],
            &[("config", false, Some("a.b=c"))],
            &["url"],
        ),
        (
            "checkout-index",
            &["--prefix=.git/hooks/", "-a"],
            &[("prefix", false, Some(".git/hooks/")), ("all", false, None)],
            &[],
        ),
    ];
    for (key, argv, want_opts, want_pos) in cases {
        let a = p(key, argv).unwrap_or_else(|e| panic!("{key} {argv:?}: {e}"));
        let got: Vec<(String, bool, Option<String>)> = a
            .opts
            .iter()
            .map(|o| {
                (
                    o.name.clone(),
                    o.negated,
                    o.value.as_ref().map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        let want: Vec<(String, bool, Option<String>)> = want_opts
            .iter()
            .map(|(n, neg, v)| (n.to_string(), *neg, v.map(str::to_owned)))
            .collect();
        assert_eq!(got, want, "{key} {argv:?}");
        let pos: Vec<String> = a
            .positional
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        assert_eq!(pos, *want_pos, "{key} {argv:?} positionals");
    }
}

#[test]
fn parse_errors_like_git() {
    let cases: &[(&str, &[&str], ParseError)] = &[
        (
            "commit",
            &["--bogus"],
            ParseError::Unknown("--bogus".into()),
        ),
        ("commit", &["-Q"], ParseError::Unknown("-Q".into())),
        ("commit", &["-m"], ParseError::MissingValue("-m".into())),
        (
            "commit",
            &["--message"],
            ParseError::MissingValue("--message".into()),
        ),
        // `--ver` could be --verbose or --verify (the negation of no-verify).
        ("commit", &["--ver"], ParseError::Ambiguous("--ver".into())),
        (
            "commit",
            &["--no-verify=x"],
            ParseError::UnexpectedValue("--no-verify=x".into()),
        ),
        (
            "push",
            &["--force="],
            ParseError::UnexpectedValue("--force=".into()),
        ),
        // Checked against git 2.47: `no-v` could be --no-verbose or --no-verify.
        (
            "commit",
            &["--no-v"],
            ParseError::Ambiguous("--no-v".into()),
        ),
        ("push", &["--fo"], ParseError::Ambiguous("--fo".into())),
    ];
    for (key, argv, want) in cases {
        assert_eq!(p(key, argv).unwrap_err(), *want, "{key} {argv:?}");
    }
}

#[test]
fn help_is_help_only_where_git_says_so() {
    assert!(p("commit", &["-h"]).unwrap().help);
    assert!(p("commit", &["-m", "x", "--help"]).unwrap().help);
    assert!(p("commit", &["--git-completion-helper"]).unwrap().help);
    assert!(p("ls-remote", &["-h", "origin"]).is_ok_and(|a| !a.help));
    // `-m --help` is a message.
    assert!(!p("commit", &["-m", "--help"]).unwrap().help);
}

#[test]
fn global_options() {
    let g = |v: &[&str]| globals(&os(v));
    assert_eq!(g(&["status"]).unwrap(), (vec![], 0));
    assert_eq!(
        g(&["-C", "sub", "-c", "a.b=c", "status"]).unwrap(),
        (
            vec![Global::Chdir("sub".into()), Global::Config("a.b=c".into())],
            4
        )
    );
    assert_eq!(
        g(&["--git-dir=.git", "--work-tree", "w", "log"]).unwrap(),
        (
            vec![Global::GitDir(".git".into()), Global::WorkTree("w".into())],
            3
        )
    );
    assert_eq!(
        g(&["--config-env=a.b=X", "x"]).unwrap().0,
        vec![Global::ConfigEnv("a.b=X".into())]
    );
    assert_eq!(
        g(&["--config-env", "a.b=X", "x"]).unwrap().0,
        vec![Global::ConfigEnv("a.b=X".into())]
    );
    assert_eq!(
        g(&["--exec-path=/tmp", "x"]).unwrap().0,
        vec![Global::ExecPath("/tmp".into())]
    );
    assert_eq!(g(&["--exec-path"]).unwrap().0, vec![Global::Query]);
    assert_eq!(g(&["--version"]).unwrap(), (vec![Global::Query], 0));
    assert_eq!(g(&["-p", "--no-pager", "--bare", "log"]).unwrap().1, 3);
    // Exact names only: git has no prefixes for global options.
    assert_eq!(
        g(&["--git-d=x", "log"]).unwrap_err(),
        ParseError::UnknownGlobal("--git-d=x".into())
    );
    assert_eq!(
        g(&["--no-verify", "commit"]).unwrap_err(),
        ParseError::UnknownGlobal("--no-verify".into())
    );
    assert_eq!(
        g(&["-c"]).unwrap_err(),
        ParseError::MissingValue("-c".into())
    );
    assert_eq!(
        g(&["-Csub", "log"]).unwrap_err(),
        ParseError::UnknownGlobal("-Csub".into())
    );
}

#[test]
fn alias_splitting_like_split_cmdline() {
    let sp = |s: &str| {
        split_cmdline(s.as_bytes()).map(|v| {
            v.into_iter()
                .map(|w| w.into_string().unwrap())
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(sp("commit -n").unwrap(), ["commit", "-n"]);
    assert_eq!(sp("  commit   -m 'a b' ").unwrap(), ["commit", "-m", "a b"]);
    assert_eq!(
        sp(r#"commit -m "a \"b\"""#).unwrap(),
        ["commit", "-m", "a \"b\""]
    );
    assert_eq!(sp(r"commit -m a\ b").unwrap(), ["commit", "-m", "a b"]);
    assert_eq!(
        sp("-c core.hooksPath=/x commit").unwrap(),
        ["-c", "core.hooksPath=/x", "commit"]
    );
    assert_eq!(sp("commit 'x"), None);
}

#[test]
fn config_parameters_both_forms() {
    let cp = |s: &str| config_parameters(s.as_bytes()).unwrap();
    assert_eq!(
        cp("'core.hookspath'='/a b' 'x.y'"),
        vec![
            (b"core.hookspath".to_vec(), Some(b"/a b".to_vec())),
            (b"x.y".to_vec(), None)
        ]
    );
    assert_eq!(cp("'a.b=c'"), vec![(b"a.b".to_vec(), Some(b"c".to_vec()))]);
    assert_eq!(
        cp("'a.b'='it'\\''s'"),
        vec![(b"a.b".to_vec(), Some(b"it's".to_vec()))]
    );
    assert!(config_parameters(b"'unterminated").is_none());
}
