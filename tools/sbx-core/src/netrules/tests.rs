use super::*;

fn rules(list: &[&str]) -> Vec<Rule> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn allowed(rs: &[Rule], method: &str, target: &str) -> bool {
    match request_path(target) {
        Ok(t) => rs.iter().any(|r| r.allows(method, &t)),
        Err(_) => false,
    }
}

#[test]
fn methods_paths_and_wildcards() {
    let rs = rules(&[
        "GET *",
        "post /o/r.git/git-receive-pack",
        "PUT /pkg/*/files/**",
        "DELETE /x/*.tmp",
    ]);
    let cases = [
        ("GET", "/anything/at/all?x=1", true),
        ("get", "/", true),
        ("OPTIONS", "*", false),
        ("GET", "*", true),
        ("POST", "/o/r.git/git-receive-pack", true),
        ("Post", "/o/r.git/git-receive-pack?service=x", true),
        ("POST", "/o/other.git/git-receive-pack", false),
        ("POST", "/o/r.git/git-receive-pack/", false),
        ("POST", "/O/r.git/git-receive-pack", false),
        ("POST", "/o/r.git/git-upload-pack", false),
        ("PUT", "/pkg/a/files", true),
        ("PUT", "/pkg/a/files/b/c", true),
        ("PUT", "/pkg/a/b/files/c", false),
        ("DELETE", "/x/a.tmp", true),
        ("DELETE", "/x/a.tmp/b", false),
        ("DELETE", "/x/y/a.tmp", false),
        // Escapes are decoded before matching, on both sides.
        ("POST", "/o/r%2Egit/git-receive-pack", true),
        ("POST", "/%6F/r.git/git-receive-pack", true),
    ];
    for (m, t, want) in cases {
        assert_eq!(allowed(&rs, m, t), want, "{m} {t}");
    }
}

/// What servers read differently is refused whatever the rules say:
/// `GET *` allows none of these.
#[test]
fn ambiguous_paths_are_refused_outright() {
    let any = rules(&["* *"]);
    for t in [
        "/o/r.git/../other.git/git-receive-pack",
        "/o/./r",
        "/o//r",
        "//o/r",
        "/o/%2e%2e/x",
        "/o/%2E/x",
        // Tomcat and Spring drop `;params`: `..;` is `..` to them.
        "/o/r.git/info/lfs/..;/..;/..;/other.git/git-receive-pack",
        "/o/.;x/r",
        "/o/%2e%2e;/x",
        // Overlong or broken UTF-8 (`%C0%AE` is `.` to a lenient decoder).
        "/o/%c0%ae%c0%ae/x",
        "/o/%C0%AE/x",
        "/o/%e0%80%ae/x",
        "/o/%C3/x",
        "/o/%C3a/x",
        "/o/%ff",
        "/o\\r",
        "/o%5cr",
        "/o%00r",
        "/o%zzr",
        "/o%2",
        "/o r",
        "/o\tr",
        "/ö",
        "/a#frag",
        "http://host/a",
        "host/a",
        "",
    ] {
        assert!(request_path(t).is_err(), "{t:?} was judged");
        assert!(!allowed(&any, "GET", t), "{t:?}");
    }
    // Well-formed UTF-8 escapes and `;` elsewhere are plain segments.
    assert!(allowed(&any, "GET", "/%C3%A9/a;b/..a;"));
    // A trailing slash is a path, and npm's escaped scope stays one segment.
    assert!(allowed(&any, "GET", "/a/"));
    let npm = rules(&["GET /@scope%2fname", "PUT /*"]);
    assert!(allowed(&npm, "GET", "/@scope%2Fname"));
    assert!(allowed(&npm, "PUT", "/@scope%2fname"));
    assert!(!allowed(&npm, "PUT", "/@scope/name"));
}

#[test]
fn bad_rules_say_why() {
    for (r, why) in [
        ("GET", "write METHOD PATH"),
        ("GET /a extra", "METHOD PATH"),
        ("G(T /a", "not an HTTP method"),
        ("GET a/b", "starts with /"),
        ("GET /a?b=c", "query"),
        ("GET /a/../b", "'..'"),
        ("GET /a//b", "empty"),
        ("GET /a**/b", "whole segment"),
        ("GET /%zz", "escape"),
    ] {
        let e = r.parse::<Entry>().unwrap_err();
        assert!(e.contains(why) && e.contains(r), "{r}: {e}");
    }
    assert_eq!(
        "readonly".parse::<Entry>().unwrap_err(),
        "rule \"readonly\": write METHOD PATH (\"GET *\", \"POST /owner/repo.git/git-receive-pack\") or a preset (read-only, repo-only, off)"
    );
    // A rule reads back as it is stored.
    let r: Rule = "post  /a/%41*/**".parse().unwrap();
    assert_eq!(r.to_string(), "POST /a/A*/**");
    assert_eq!(r.to_string().parse::<Rule>().unwrap(), r);
}

#[test]
fn presets_expand() {
    let ro = HostRules(vec![Entry::Preset(Preset::ReadOnly)]).expand(&[]);
    assert!(allowed(&ro, "GET", "/left-pad"));
    assert!(allowed(&ro, "HEAD", "/left-pad"));
    for m in ["PUT", "POST", "DELETE", "PATCH"] {
        assert!(!allowed(&ro, m, "/left-pad"), "{m}");
    }
    let off = HostRules(vec![Entry::Preset(Preset::Off)]).expand(&[]);
    assert!(off.is_empty());
    let repo = HostRules(vec![Entry::Preset(Preset::RepoOnly)]).expand(&["/me/app".into()]);
    for t in [
        "/me/app.git/git-receive-pack",
        "/me/app/git-receive-pack",
        "/me/app.git/git-upload-pack",
        "/me/app.git/info/lfs/objects/batch",
    ] {
        assert!(allowed(&repo, "POST", t), "{t}");
    }
    for t in [
        "/me/other.git/git-receive-pack",
        "/evil/app.git/git-receive-pack",
        "/me/app.git/../../evil/x.git/git-receive-pack",
    ] {
        assert!(!allowed(&repo, "POST", t), "{t}");
    }
    assert!(allowed(
        &repo,
        "GET",
        "/me/other.git/info/refs?service=git-receive-pack"
    ));
}

#[test]
fn remotes_name_their_repository() {
    let h = "git.test";
    for (url, want) in [
        ("https://git.test/me/app.git", Some("/me/app")),
        ("https://user@git.test:8443/me/app/", Some("/me/app")),
        ("ssh://git@git.test/me/app.git", Some("/me/app")),
        ("git@git.test:me/app.git", Some("/me/app")),
        ("https://GIT.test/me/app", Some("/me/app")),
        ("https://other.test/me/app.git", None),
        ("https://git.test/app.git", None),
        ("https://git.test/me/../x/app.git", None),
        ("https://git.test/me/*/app.git", None),
        ("file:///srv/git.test/me/app", None),
        ("/srv/me/app.git", None),
    ] {
        assert_eq!(remote_repo(url, h).as_deref(), want, "{url}");
    }
}

#[test]
fn config_values_are_a_preset_or_a_list() {
    #[derive(Deserialize)]
    struct T {
        r: HostRules,
    }
    let t: T = toml::from_str("r = \"read-only\"").unwrap();
    assert_eq!(t.r.0, [Entry::Preset(Preset::ReadOnly)]);
    let t: T = toml::from_str("r = [\"repo-only\", \"POST /x\"]").unwrap();
    assert_eq!(t.r.0.len(), 2);
    let e = toml::from_str::<T>("r = [\"GET /a?b\"]")
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("rule \"GET /a?b\""), "{e}");
    assert!(toml::from_str::<T>("r = 3").is_err());
}

/// A `_method` query parameter is the method to Laravel, Symfony and
/// Rack, however PHP spells its name.
#[test]
fn method_overrides_in_the_query_are_found() {
    for t in [
        "/a?_method=DELETE",
        "/a?x=1&_METHOD=put",
        "/a?x;%5Fmethod=DELETE",
        "/a?.method=DELETE",
        "/a?+method=DELETE",
        "/a?_%6dethod",
    ] {
        assert!(query_overrides_method(t), "{t}");
    }
    for t in [
        "/a",
        "/a/_method",
        "/a?method=DELETE",
        "/a?x=_method",
        "/a?_methods=1",
    ] {
        assert!(!query_overrides_method(t), "{t}");
    }
}
