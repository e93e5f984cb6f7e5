//! Every relative link in README.md, CONTRIBUTING.md, bench/RESULTS.md and
//! docs/*.md resolves: the file exists and, for Markdown, the `#anchor`
//! names one of its headings as GitHub renders it.

#[test]
fn relative_links_resolve() {
    let root = xtask::root();
    let files = xtask::links::checked_files(&root);
    let broken = xtask::links::broken(&root, &files);
    let list: Vec<String> = broken.iter().map(|b| b.to_string()).collect();
    assert!(
        list.is_empty(),
        "{} broken link(s):\n{}",
        list.len(),
        list.join("\n")
    );
}
