//! An operation the sandbox's git left half done under the workspace's
//! `.git` is the agent's to write in bind mode (git needs it), and the
//! user's `git rebase --continue` (or `cherry-pick --continue`, `am
//! --continue`) on the host runs what it says: an `exec` line of the
//! todo list runs as a shell command, a merge strategy that is not git's
//! own runs `git-merge-NAME` (a path into the work tree when NAME holds
//! `/`), and an option git passes on writes a file where it names:
//! `git am`'s `apply-opt` with `--build-fake-ancestor=FILE` (an index
//! written at FILE, anywhere on the host), a strategy option
//! `index-output=FILE` that `git-merge-resolve` hands, unquoted, to `git
//! read-tree`. rerere's `MERGE_RR` (in a git dir) names paths the host's
//! next `git commit` reads and writes as it pleases, wherever they point.
//! The broker refuses `rebase --exec` and other strategies, so
//! only a hand-written state (or an editor's) holds them: the watcher
//! (masks.rs) hands each write under such a directory to [`check`],
//! which moves the file aside and kills every process of the agent.

use std::path::{Path, PathBuf};

/// The directories git keeps an unfinished operation in (any git dir
/// under `.git`: the main one, a submodule's).
const STATE_DIRS: &[&str] = &["rebase-merge", "rebase-apply", "sequencer"];

/// rerere's list of conflicted paths, in a git dir (the main one, a
/// submodule's).
const MERGE_RR: &str = "MERGE_RR";

/// What in a file's text the host's git would run, said in a few words.
type Test = fn(&str) -> Option<String>;

/// Files of a state directory, and what in them the host's git would run.
const FILES: &[(&str, Test)] = &[
    ("git-rebase-todo", exec_line),
    ("todo", exec_line),
    ("strategy", strategy_file),
    ("strategy_opts", strategy_opts_file),
    ("opts", opts_strategy),
    ("apply-opt", apply_opts),
];

/// The first line of a todo list the sequencer runs as a command
/// (sequencer.c `is_command`: `exec` or `x`, after blanks, ended by a
/// blank, CR or the line's end), escaped.
fn exec_line(todo: &str) -> Option<String> {
    todo.lines()
        .find(|l| {
            let w = l.trim_start_matches([' ', '\t']);
            let w = w.split([' ', '\t', '\r']).next().unwrap_or_default();
            w == "exec" || w == "x"
        })
        .map(|l| format!("an exec line ({}) the host's git would run", shown(l)))
}

/// A merge strategy that is not git's own: the sequencer runs
/// `git-merge-NAME` for it.
fn strategy(name: &str) -> Option<String> {
    (!name.is_empty() && !sbx_core::GIT_MERGE_STRATEGIES.contains(&name)).then(|| {
        format!(
            "merge strategy {}, not git's own, which the host's git would run as git-merge-NAME",
            shown(name)
        )
    })
}

fn strategy_file(text: &str) -> Option<String> {
    strategy(text.trim())
}

/// `strategy = NAME` (or a `strategy-option` git's own strategies do
/// not take) in the sequencer's `opts` (config syntax; keys in any case,
/// quotes dropped).
fn opts_strategy(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        // git's parser takes a key after a section header on one line.
        let l = l.trim_start();
        let l = match l.strip_prefix('[') {
            Some(r) => r.split_once(']').map_or("", |(_, key)| key),
            None => l,
        };
        let (k, v) = l.split_once('=')?;
        let v = v.trim().trim_matches('"');
        match k.trim().to_ascii_lowercase().as_str() {
            "strategy" => strategy(v),
            "strategy-option" => strategy_option(v),
            _ => None,
        }
    })
}

/// The merge options (`-X`) git's strategies take (merge-ort.c and
/// merge-recursive.c `parse_merge_opt`), those with a value as `NAME=`.
const STRATEGY_OPTIONS: &[&str] = &[
    "ours",
    "theirs",
    "subtree",
    "subtree=",
    "patience",
    "histogram",
    "diff-algorithm=",
    "ignore-space-change",
    "ignore-all-space",
    "ignore-space-at-eol",
    "ignore-cr-at-eol",
    "renormalize",
    "no-renormalize",
    "no-renames",
    "find-renames",
    "find-renames=",
    "rename-threshold=",
];

/// A strategy option (`-X`, its `--` dropped) that is not one of git's
/// own, or whose value holds more than a plain path may: the sequencer
/// passes it to a strategy that is a program (`resolve` runs
/// `git-merge-resolve --OPT`, whose shell splits it unquoted into `git
/// read-tree`'s options, `--index-output=FILE` writing an index at FILE).
fn strategy_option(opt: &str) -> Option<String> {
    let o = opt.strip_prefix("--").unwrap_or(opt);
    let (name, value) = match o.split_once('=') {
        Some((n, v)) => (&o[..=n.len()], v),
        None => (o, ""),
    };
    let plain = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._/%+-".contains(&b));
    (!(STRATEGY_OPTIONS.contains(&name) && plain && !value.starts_with('-'))).then(|| {
        format!(
            "strategy option {}, not one git's strategies take, which the host's git would pass on",
            shown(opt)
        )
    })
}

/// The rebase's strategy options (`-X`, split as the sequencer does, at
/// blanks; a quoted one is refused whole).
fn strategy_opts_file(text: &str) -> Option<String> {
    text.split_ascii_whitespace().find_map(strategy_option)
}

/// The options `git am` passes through to `git apply` (am.c's
/// `OPT_PASSTHRU_ARGV`s), those with a value as `NAME=`; `apply-opt`
/// holds them as `git am` wrote them.
const APPLY_OPTIONS: &[&str] = &[
    "--whitespace=",
    "--ignore-space-change",
    "--ignore-whitespace",
    "--directory=",
    "--exclude=",
    "--include=",
    "--reject",
    "-C",
    "-p",
];

/// `git am`'s stored options for `git apply` (sq-quoted, as
/// `sq_quote_argv` writes them): any other than those `git am` passes on
/// (or an abbreviation git's option parser would take) is refused:
/// `--build-fake-ancestor=FILE` had the host's `git am --skip` write an
/// index at FILE, anywhere.
fn apply_opts(text: &str) -> Option<String> {
    let Some(opts) = sq_dequote(text.trim_end_matches('\n')) else {
        return Some("apply-opt the host's git would not parse".into());
    };
    opts.iter()
        .find(|o| {
            !APPLY_OPTIONS.iter().any(|a| match a.strip_prefix("--") {
                Some(_) if a.ends_with('=') => o.starts_with(a),
                Some(_) => o == a,
                None => o.strip_prefix(a).is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())),
            })
        })
        .map(|o| {
            format!(
                "apply option {}, not one git am passes on, with which the host's git would write outside the checkout",
                shown(o)
            )
        })
}

/// Words quoted as git's `sq_quote_argv` writes them (` 'a' 'b'\''c'`),
/// as its `sq_dequote_to_strvec` reads them; None where git's read fails.
fn sq_dequote(text: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = text.trim_start_matches(' ');
    while !rest.is_empty() {
        let mut word = String::new();
        loop {
            let body = rest.strip_prefix('\'')?;
            let end = body.find('\'')?;
            word.push_str(&body[..end]);
            rest = &body[end + 1..];
            // `'\''` inside a word: a quote or `!`, escaped.
            match rest.strip_prefix('\\') {
                Some(r) => {
                    let c = r.chars().next().filter(|c| *c == '\'' || *c == '!')?;
                    word.push(c);
                    rest = &r[1..];
                }
                None => break,
            }
        }
        out.push(word);
        match rest.strip_prefix(' ') {
            Some(r) => rest = r.trim_start_matches(' '),
            None if rest.is_empty() => {}
            None => return None,
        }
    }
    Some(out)
}

/// rerere's `MERGE_RR`: `HASH[.VARIANT]\tPATH\0` for each path a merge
/// left in conflict. The host's git runs rerere after every `git commit`
/// (and merge, rebase, am) when `.git/rr-cache` exists, and takes each
/// PATH as it is, through links: one resolved (no conflict markers) is
/// copied into `rr-cache` (`/root/.ssh/id_ed25519`, for the agent to read),
/// and for a negative VARIANT the recorded postimage is merged into it
/// and written back (`/root/.bashrc`). A name in the work tree is no
/// safer: the agent makes it a link. So any entry is refused: a conflict
/// rerere records in the sandbox ends it.
fn merge_rr(text: &str) -> Option<String> {
    let first = text.split('\0').find(|e| !e.trim().is_empty())?;
    Some(format!(
        "rerere's MERGE_RR names {}, which the host's next git commit would read and write wherever it points",
        shown(first.split_once('\t').map_or(first, |(_, p)| p))
    ))
}

fn shown(s: &str) -> String {
    let cut: String = s.chars().take(80).collect();
    sbx_core::sanitize::field(&cut).into_owned()
}

/// The state directory `path` is or is in, workspace-relative, when it
/// is one under `.git`.
fn state_dir(root: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(root).ok()?;
    if !rel.starts_with(".git") {
        return None;
    }
    if rel.file_name().is_some_and(|n| n == MERGE_RR) {
        return rel.parent().map(Path::to_path_buf);
    }
    [Some(rel), rel.parent()]
        .into_iter()
        .flatten()
        .find(|d| {
            d.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| STATE_DIRS.contains(&n))
        })
        .map(Path::to_path_buf)
}

/// The first file of the state directory `dir` holding what the host's
/// git would run, and why.
fn bad(r: &sbx_sys::beneath::Root, dir: &Path) -> Option<(PathBuf, String)> {
    use std::io::Read as _;
    let in_state = dir
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| STATE_DIRS.contains(&n));
    let files: &[(&str, Test)] = if in_state {
        FILES
    } else {
        &[(MERGE_RR, merge_rr)]
    };
    files.iter().find_map(|(name, test)| {
        let rel = dir.join(name);
        let mut text = Vec::new();
        // A todo list longer than this is none the agent's git wrote.
        r.open_read(&rel)
            .ok()?
            .take(64 << 20)
            .read_to_end(&mut text)
            .ok()?;
        test(&String::from_utf8_lossy(&text)).map(|why| (rel, why))
    })
}

/// Whether `path` is, or is in, a state directory under `.git`.
pub fn touches(root: &Path, path: &Path) -> bool {
    state_dir(root, path).is_some()
}

/// Check the state directory `path` is or is in; when it holds what the
/// host's git would run, move that file aside as the agent and kill every
/// process of the agent. Returns what was done.
pub fn check(root: &Path, path: &Path, uid: u32, gid: u32) -> Option<String> {
    let dir = state_dir(root, path)?;
    let r = sbx_sys::beneath::Root::open(root).ok()?;
    let (file, why) = bad(&r, &dir)?;
    Some(crate::gitindex::refuse(&r, &file, uid, gid, &why, |r| {
        bad(r, &dir).is_some_and(|(f, _)| f == file)
    }))
}

/// Every state directory under the workspace's `.git` now (its git
/// dir's and its submodules'), and every `MERGE_RR` there, for a check at start and after a change whose events may
/// have been missed.
pub fn dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(root.join(".git"), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            if name == MERGE_RR {
                out.push(e.path());
            }
            if !e.file_type().is_ok_and(|t| t.is_dir())
                || ["objects", "logs", "refs"].iter().any(|n| name == *n)
            {
                continue;
            }
            if name.to_str().is_some_and(|n| STATE_DIRS.contains(&n)) {
                out.push(e.path());
            } else if depth < 14 {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_sequencer_runs_is_found() {
        assert!(exec_line("pick 1 a\nexec touch x\n").is_some());
        assert!(exec_line("pick 1 a\n  x\tid\n").is_some());
        assert!(exec_line("x\r\n").is_some());
        assert!(exec_line("pick 1 a\n# exec x\nbreak\nxx y\nexecute\n").is_none());
        assert!(strategy_file("ort\n").is_none());
        assert!(strategy_file("../../evil\n").is_some());
        assert!(opts_strategy("[options]\n\tstrategy = ort\n").is_none());
        assert!(opts_strategy("[options]\n\tStrategy = \"../x\"\n").is_some());
        assert!(apply_opts("'--unsafe-paths'").is_some());
        assert!(apply_opts(" '-p1' '--whitespace=fix' '-C3' '--directory=a b'\n").is_none());
        assert!(apply_opts("").is_none());
        assert!(apply_opts(" '--build-fake-ancestor=/root/.bashrc'").is_some());
        assert!(apply_opts(" '-p1' '--build-fake'").is_some());
        assert!(apply_opts(" '--unsafe'").is_some());
        assert!(apply_opts(" '-p1x'").is_some());
        assert!(apply_opts(" '-p1").is_some());
        assert!(apply_opts(" '--reject'x").is_some());
        assert_eq!(
            sq_dequote(" 'a'\\''b' 'c'\\!''"),
            Some(vec!["a'b".into(), "c!".into()])
        );
        assert!(merge_rr("").is_none());
        assert!(merge_rr("0123\tsrc/a.c\0").is_some());
        assert!(merge_rr("0123.-1\t/root/.bashrc\0").is_some());
        assert!(strategy_opts_file("ours\n").is_none());
        assert!(strategy_opts_file(" --ours --find-renames=50% --subtree=a/b\n").is_none());
        assert!(strategy_opts_file(" --index-output=/var/tmp/x\n").is_some());
        assert!(strategy_opts_file(" \"ours --index-output=/x\"").is_some());
        assert!(strategy_opts_file(" --subtree=--index-output=/x").is_some());
        assert!(opts_strategy("[options]\n\tstrategy-option = ours\n").is_none());
        assert!(opts_strategy("[options] strategy = ../x\n").is_some());
        assert!(opts_strategy("[options]strategy-option=index-output=/x\n").is_some());
        assert!(
            opts_strategy("[options]\n\tstrategy-option = ours\\\n --index-output=/x\n").is_some()
        );
        assert!(opts_strategy("[options]\n\tStrategy-Option = \"index-output=/x\"\n").is_some());
    }

    #[test]
    fn state_dirs_are_those_under_git() {
        let r = Path::new("/w");
        let d = |p: &str| state_dir(r, Path::new(p));
        assert_eq!(
            d("/w/.git/rebase-merge/git-rebase-todo"),
            Some(".git/rebase-merge".into())
        );
        assert_eq!(d("/w/.git/sequencer"), Some(".git/sequencer".into()));
        assert_eq!(
            d("/w/.git/modules/s/rebase-apply/apply-opt"),
            Some(".git/modules/s/rebase-apply".into())
        );
        assert_eq!(d("/w/.git/MERGE_RR"), Some(".git".into()));
        assert_eq!(
            d("/w/.git/modules/s/MERGE_RR"),
            Some(".git/modules/s".into())
        );
        assert_eq!(d("/w/src/MERGE_RR"), None);
        assert_eq!(d("/w/src/sequencer/todo"), None);
        assert_eq!(d("/w/.git/index"), None);
    }
}
