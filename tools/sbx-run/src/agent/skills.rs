//! `.agent-sandbox/skills/<name>/SKILL.md` (Agent Skills format): validated,
//! then copied to the workspace's `.claude/skills/<name>/`.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub dir: PathBuf,
}

/// The front matter's scalar keys (`key: value`, quoted or not, and `>`/`|`
/// blocks). Only `name` and `description` matter here; other keys pass.
fn front_matter(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err("no YAML front matter (the file must start with a line `---`)".into());
    }
    let mut out: Vec<(String, String)> = Vec::new();
    let mut block: Option<(String, bool, Vec<String>)> = None;
    let mut closed = false;
    for l in lines {
        if l.trim_end() == "---" {
            closed = true;
            break;
        }
        if let Some((_, _, acc)) = &mut block
            && (l.starts_with(' ') || l.starts_with('\t') || l.trim().is_empty())
        {
            acc.push(l.trim().to_owned());
            continue;
        }
        if let Some((k, folded, acc)) = block.take() {
            out.push((
                k,
                acc.join(if folded { " " } else { "\n" }).trim().to_owned(),
            ));
        }
        if l.trim().is_empty() || l.trim_start().starts_with('#') || l.starts_with(' ') {
            continue;
        }
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| format!("front matter line {l:?} is not `key: value`"))?;
        let v = v.trim();
        match v {
            ">" | ">-" | "|" | "|-" => {
                block = Some((k.trim().to_owned(), v.starts_with('>'), Vec::new()))
            }
            _ => {
                let unq = if v.len() >= 2
                    && ((v.starts_with('"') && v.ends_with('"'))
                        || (v.starts_with('\'') && v.ends_with('\'')))
                {
                    &v[1..v.len() - 1]
                } else {
                    v
                };
                out.push((k.trim().to_owned(), unq.to_owned()));
            }
        }
    }
    if let Some((k, folded, acc)) = block.take() {
        out.push((
            k,
            acc.join(if folded { " " } else { "\n" }).trim().to_owned(),
        ));
    }
    if !closed {
        return Err("front matter is not closed by a line `---`".into());
    }
    Ok(out)
}

/// Agent Skills name rules: 1-64 of a-z, 0-9 and `-`, no `-` at either end
/// or twice in a row, equal to the directory's name.
pub fn check_name(name: &str, dir_name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!("name \"{name}\" must be 1-64 characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!("name \"{name}\" may hold only a-z, 0-9 and -"));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(format!(
            "name \"{name}\" may not start or end with - or hold --"
        ));
    }
    if name != dir_name {
        return Err(format!(
            "name \"{name}\" must equal its directory's name \"{dir_name}\""
        ));
    }
    Ok(())
}

pub fn parse(skill_md: &Path, text: &str, dir_name: &str) -> Result<Skill, String> {
    let at = |m: String| format!("{}: {m}", skill_md.display());
    let fm = front_matter(text).map_err(at)?;
    let get = |k: &str| fm.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let name = get("name").ok_or_else(|| at("front matter has no `name`".into()))?;
    check_name(&name, dir_name).map_err(at)?;
    let description =
        get("description").ok_or_else(|| at("front matter has no `description`".into()))?;
    let n = description.chars().count();
    if !(1..=1024).contains(&n) {
        return Err(at(format!(
            "description must be 1-1024 characters, not {n}"
        )));
    }
    Ok(Skill {
        name,
        description,
        dir: skill_md.parent().map(Path::to_owned).unwrap_or_default(),
    })
}

/// Every skill under `dir` (none when it does not exist), validated.
pub fn load(dir: &Path) -> Result<Vec<Skill>, String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    names.sort();
    let mut out = Vec::new();
    for d in names {
        if !d.is_dir() {
            continue;
        }
        let md = d.join("SKILL.md");
        let text = std::fs::read_to_string(&md).map_err(|e| {
            format!(
                "{}: {e} (each skill directory needs a SKILL.md)",
                md.display()
            )
        })?;
        let dir_name = d
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push(parse(&md, &text, &dir_name)?);
    }
    Ok(out)
}

/// Copy the skill directory `from` (in the protected `.agent-sandbox`) to
/// `to` under the workspace `root`, through no link there; files are
/// replaced, never written through, and given to the workspace's owner.
pub fn copy_tree(
    from: &Path,
    root: &sbx_sys::beneath::Root,
    to: &Path,
    owner: (u32, u32),
) -> std::io::Result<()> {
    root.create_dir_all(to, 0o755)?;
    give(root, to, owner);
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let ft = e.file_type()?;
        let dest = to.join(e.file_name());
        if ft.is_dir() {
            copy_tree(&e.path(), root, &dest, owner)?;
        } else if ft.is_file() {
            root.write_atomic(&dest, &std::fs::read(e.path())?, 0o644)?;
            give(root, &dest, owner);
        }
    }
    Ok(())
}

/// Hand `rel` to the workspace's owner (sbx-run runs as root); a link
/// swapped in since is not followed (AT_EMPTY_PATH on its own fd).
pub fn give(root: &sbx_sys::beneath::Root, rel: &Path, owner: (u32, u32)) {
    if let Ok(fd) = root.open_path(rel) {
        crate::workspace::give_fd(&fd, owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for (n, ok) in [
            ("pdf", true),
            ("pdf-tools2", true),
            ("", false),
            ("Pdf", false),
            ("-pdf", false),
            ("pdf-", false),
            ("pd--f", false),
            ("pd_f", false),
            (&"a".repeat(65), false),
        ] {
            assert_eq!(check_name(n, n).is_ok(), ok, "{n}");
        }
        assert!(check_name("pdf", "other").is_err());
    }

    #[test]
    fn front_matter_cases() {
        let p = Path::new("s/x/SKILL.md");
        let ok = "---\nname: x\ndescription: \"Does x. Use when y.\"\nlicense: MIT\n---\nbody\n";
        assert_eq!(
            parse(p, ok, "x").map(|s| s.description),
            Ok("Does x. Use when y.".into())
        );
        let folded = "---\nname: x\ndescription: >\n  line one\n  line two\n---\n";
        assert_eq!(
            parse(p, folded, "x").map(|s| s.description),
            Ok("line one line two".into())
        );
        for bad in [
            "name: x\n",
            "---\nname: x\n",
            "---\ndescription: d\n---\n",
            "---\nname: x\n---\n",
            "---\nname: x\ndescription: \"\"\n---\n",
            &format!("---\nname: x\ndescription: {}\n---\n", "d".repeat(1025)),
        ] {
            let e = parse(p, bad, "x").unwrap_err();
            assert!(e.starts_with("s/x/SKILL.md: "), "{e}");
        }
    }
}
