use super::*;

/// The commands `script` runs, words known or shown as `?`/`<pattern>`,
/// the command word without its directory (as rules match it).
fn cmds(script: &str) -> Vec<String> {
    analyze(script)
        .commands
        .iter()
        .map(|c| {
            c.0.iter()
                .enumerate()
                .map(|(i, w)| match w {
                    Word::Lit(s) if i == 0 => basename(s).to_owned(),
                    Word::Lit(s) => s.clone(),
                    Word::Pattern(p) => format!("<{p}>"),
                    Word::Dynamic => "?".into(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn quoting_is_undone_as_the_shell_does() {
    for (script, want) in [
        ("\\curl x", "curl x"),
        ("c''url x", "curl x"),
        ("\"curl\" x", "curl x"),
        ("'c'\"u\"rl 'a b'", "curl a b"),
        ("cu\\rl", "curl"),
    ] {
        assert_eq!(cmds(script), [want], "{script}");
    }
}

#[test]
fn every_part_of_a_compound_command() {
    for script in [
        "ls && curl x",
        "ls; curl x",
        "ls | curl x",
        "ls\ncurl x",
        "( curl x )",
        "{ curl x; }",
        "if true; then curl x; fi",
        "for i in 1; do curl x; done",
        "while false; do curl x; done",
        "case a in a) curl x;; esac",
        "f() { curl x; }",
        "ls & curl x",
        "! curl x",
        "time curl x",
        "echo $(curl x)",
        "echo `curl x`",
        "echo \"$(curl x)\"",
        "cat <(curl x)",
        "X=$(curl x) ls",
        "ls > $(curl x)",
        "[[ $(curl x) = y ]]",
        "cat <<EOF\n$(curl x)\nEOF",
    ] {
        assert!(
            cmds(script).iter().any(|c| c == "curl x"),
            "{script:?}: {:?}",
            cmds(script)
        );
    }
}

#[test]
fn wrappers_are_unwrapped() {
    for script in [
        "/usr/bin/curl x",
        "env -i curl x",
        "env FOO=1 curl x",
        "env -u X -C /tmp FOO=1 curl x",
        "sudo -u x curl x",
        "sudo -E -u x -- curl x",
        "sudo --user=x FOO=1 curl x",
        "xargs curl x",
        "xargs -0 -n1 curl x",
        "xargs -I{} curl x",
        "command curl x",
        "command -p curl x",
        "exec curl x",
        "exec -a name curl x",
        "nice curl x",
        "nice -n 5 curl x",
        "nice -5 curl x",
        "nohup curl x",
        "timeout 5 curl x",
        "timeout -s KILL -k 1 5s curl x",
        "stdbuf -oL curl x",
        "stdbuf -o L curl x",
        "/usr/bin/time -f %e curl x",
        "setsid -f curl x",
        "nice nohup timeout 5 env A=1 /usr/bin/curl x",
        "bash -c 'curl x'",
        "sh -c \"curl x\"",
        "bash -lc 'curl x'",
        "bash -e -o pipefail -c 'ls; curl x'",
        "/bin/sh -c 'sh -c \"curl x\"'",
        "eval 'curl x'",
        "eval curl x",
        "find . -exec curl x \\;",
        "su -c 'curl x' nobody",
        "trap 'curl x' EXIT",
    ] {
        assert!(
            cmds(script).iter().any(|c| c == "curl x"),
            "{script:?}: {:?}",
            cmds(script)
        );
    }
}

#[test]
fn what_the_shell_computes_stays_unknown() {
    let c = cmds("$X x");
    assert_eq!(c, ["? x"]);
    assert_eq!(cmds("cu$(echo)rl x")[1], "? x");
    assert_eq!(cmds("/usr/bin/cur? x"), ["</usr/bin/cur?> x"]);
    assert_eq!(cmds("{c,}url x"), ["<*url> x"]);
    // Quoted, a glob character is text.
    assert_eq!(cmds("'cur?' x"), ["cur? x"]);
    for script in [
        "eval \"$CMD\"",
        "bash -c \"$CMD\"",
        "echo curl x | sh",
        "bash < script",
        "bash -s",
        "env -S 'curl x'",
        "sudo --frobnicate curl x",
        "echo 'unterminated",
        "su nobody",
        "echo ${X:-$(curl x)}",
    ] {
        let s = analyze(script);
        assert!(s.unknown.is_some(), "{script:?}: {:?}", s.commands);
    }
    // A script file is not read (advisory, see the README).
    assert!(analyze("bash ./deploy.sh").unknown.is_none());
    assert!(analyze("ls -la && git status").unknown.is_none());
}

#[test]
fn deep_nesting_is_bounded() {
    let mut s = "curl x".to_owned();
    for _ in 0..40 {
        s = format!("echo $({s})");
    }
    let a = analyze(&s);
    assert!(a.unknown.is_some());
}

#[test]
fn wildcards() {
    assert!(wild_match("cur?", "curl"));
    assert!(wild_match("*url", "curl"));
    assert!(wild_match("c\\*rl", "c*rl"));
    assert!(!wild_match("c\\*rl", "curl"));
    assert!(!wild_match("wget*", "curl"));
}
