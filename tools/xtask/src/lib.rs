//! Renders `man/<tool>.1` and `completions/{bash,zsh,fish}/` from each
//! tool's `command()`, so help, man page and completions never disagree.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use clap_complete::Shell;

pub mod configdoc;
pub mod git_options;
pub mod links;

/// Every binary's clap definition. A new tool adds one line here.
pub fn commands() -> Vec<clap::Command> {
    vec![
        sbx_backup::command(),
        sbx_envfilter::command(),
        sbx_fw::command(),
        sbx_git_guard::command(),
        sbx_guest::command(),
        sbx_run::command(),
        sbx_server::command(),
        sbx_tool_guard::command(),
        sbx_worktree::command(),
    ]
}

/// (path relative to the repository root, contents) of every generated file.
pub fn render() -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = vec![(PathBuf::from("docs/config.md"), configdoc::render())];
    for cmd in commands() {
        let name = cmd.get_name().to_owned();
        files.push((PathBuf::from(format!("man/{name}.1")), man_page(&cmd)));
        for (shell, dir, file) in [
            (Shell::Bash, "bash", name.clone()),
            (Shell::Zsh, "zsh", format!("_{name}")),
            (Shell::Fish, "fish", format!("{name}.fish")),
        ] {
            let mut out = Vec::new();
            let mut c = cmd.clone();
            clap_complete::generate(shell, &mut c, &name, &mut out);
            files.push((PathBuf::from(format!("completions/{dir}/{file}")), out));
        }
    }
    files
}

/// The man page: clap_mangen's sections, then the long help's extra text
/// as real roff (indented blocks kept as preformatted tables).
fn man_page(cmd: &clap::Command) -> Vec<u8> {
    let extra = cmd.get_after_long_help().map(|h| h.to_string());
    let bare = cmd
        .clone()
        .after_long_help(None::<&str>)
        .after_help(None::<&str>);
    let man = clap_mangen::Man::new(bare)
        .date("2026-11-22")
        .source(format!("sbx {}", env!("CARGO_PKG_VERSION")))
        .manual("sbx manual");
    let mut out = Vec::new();
    let io = |r: std::io::Result<()>| r.expect("rendering to memory cannot fail");
    io(man.render_title(&mut out));
    io(man.render_name_section(&mut out));
    io(man.render_synopsis_section(&mut out));
    io(man.render_description_section(&mut out));
    io(man.render_options_section(&mut out));
    if cmd.has_subcommands() {
        io(man.render_subcommands_section(&mut out));
    }
    if let Some(text) = extra {
        out.extend_from_slice(b".SH DETAILS\n");
        out.extend_from_slice(roff_blocks(&text).as_bytes());
    }
    io(man.render_version_section(&mut out));
    out
}

/// Escape a line for roff.
fn roff_escape(line: &str) -> String {
    let mut s = line.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        s.insert_str(0, "\\&");
    }
    s
}

/// Paragraphs become `.PP`; runs of indented lines become `.nf` blocks so
/// their columns survive.
pub fn roff_blocks(text: &str) -> String {
    let mut out = String::new();
    let mut first = true;
    for para in text.split("\n\n") {
        let lines: Vec<&str> = para.lines().collect();
        for run in lines.chunk_by(|a, b| a.starts_with("  ") == b.starts_with("  ")) {
            if run[0].starts_with("  ") {
                out.push_str(".RS 2\n.nf\n");
                for l in run {
                    out.push_str(&roff_escape(&l[2..]));
                    out.push('\n');
                }
                out.push_str(".fi\n.RE\n");
            } else {
                if !first {
                    out.push_str(".PP\n");
                }
                for l in run {
                    out.push_str(&roff_escape(l));
                    out.push('\n');
                }
            }
            first = false;
        }
    }
    out
}

/// Repository root (xtask lives in tools/xtask).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Generated files that differ from what is on disk.
pub fn stale(root: &Path) -> Vec<PathBuf> {
    render()
        .into_iter()
        .filter(|(p, want)| std::fs::read(root.join(p)).ok().as_deref() != Some(want.as_slice()))
        .map(|(p, _)| p)
        .collect()
}
