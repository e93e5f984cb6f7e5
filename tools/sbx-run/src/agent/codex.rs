//! `codex exec`'s endpoint and MCP servers as `-c` overrides.
//!
//! Codex reads no `.mcp.json`, so `[agent.mcp]` and sbx's host-tools relay
//! become `-c mcp_servers.NAME={…}` (one inline TOML table per server, so the
//! user's own servers in `~/.codex/config.toml` stay).
//!
//! An endpoint or a key given to sbx makes a model provider `sbx` speaking
//! the Responses API; the key itself is never an argument: `agent-launch
//! --cli codex` adds `model_providers.sbx.auth`, a command (`sbx-guest
//! agent-key SOCKET`) codex runs for its bearer token, served once.

use std::collections::BTreeMap;

use sbx_core::config::agent::McpServer;
use sbx_core::hosttools::SERVER;

/// Codex's own rule for server names; anything else would be a dotted or
/// quoted key its `-c` parser splits differently.
fn codex_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn toml_list(items: &[String]) -> String {
    let v: Vec<String> = items.iter().map(|s| toml_str(s)).collect();
    format!("[{}]", v.join(", "))
}

fn server(command: &str, args: &[String], env: &BTreeMap<String, String>, pass: &[&str]) -> String {
    let env: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{} = {}", toml_str(k), toml_str(v)))
        .collect();
    let pass: Vec<String> = pass.iter().map(|s| (*s).to_owned()).collect();
    format!(
        "{{command = {}, args = {}, env = {{{}}}, env_vars = {}}}",
        toml_str(command),
        toml_list(args),
        env.join(", "),
        toml_list(&pass)
    )
}

/// The provider sbx defines when it has an endpoint or a key.
pub const PROVIDER: &str = "sbx";

/// `-c` arguments pointing codex at `base_url` (Responses API). With no
/// key of sbx's, the provider takes codex's own OpenAI login.
pub fn provider_args(base_url: Option<&str>, key: bool) -> Vec<String> {
    if base_url.is_none() && !key {
        return Vec::new();
    }
    let mut kv = vec![
        format!("model_provider={}", toml_str(PROVIDER)),
        format!("model_providers.{PROVIDER}.name={}", toml_str(PROVIDER)),
        format!("model_providers.{PROVIDER}.wire_api=\"responses\""),
    ];
    if let Some(u) = base_url {
        kv.push(format!(
            "model_providers.{PROVIDER}.base_url={}",
            toml_str(u)
        ));
    }
    if !key {
        kv.push(format!(
            "model_providers.{PROVIDER}.requires_openai_auth=true"
        ));
    }
    kv.into_iter().flat_map(|a| ["-c".to_owned(), a]).collect()
}

/// The `-c` arguments for `codex exec`, or the name codex would not take.
pub fn mcp_args(
    mcp: &BTreeMap<String, McpServer>,
    host_tools: bool,
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (name, s) in mcp {
        if !codex_name(name) {
            return Err(format!(
                "[agent.mcp.{name}]: codex takes MCP server names of letters, digits, _ and - only; rename it"
            ));
        }
        let (cmd, args) = s
            .command
            .0
            .split_first()
            .map_or(("", &[][..]), |(c, a)| (c.as_str(), a));
        out.extend([
            "-c".into(),
            format!("mcp_servers.{name}={}", server(cmd, args, &s.env, &[])),
        ]);
    }
    if host_tools {
        // Codex starts MCP servers with a cleared environment: the relay's
        // socket (named by agent-launch) must be passed on by name.
        out.extend([
            "-c".into(),
            format!(
                "mcp_servers.{SERVER}={}",
                server(
                    "/usr/local/bin/sbx-guest",
                    &["mcp-host-tools".into()],
                    &BTreeMap::new(),
                    &[sbx_core::hosttools::SOCKET_ENV],
                )
            ),
        ]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mcp(name: &str, argv: &[&str], env: &[(&str, &str)]) -> BTreeMap<String, McpServer> {
        let text = format!(
            "command = {}\nenv = {{{}}}\n",
            toml_list(&argv.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            env.iter()
                .map(|(k, v)| format!("{} = {}", toml_str(k), toml_str(v)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let s: McpServer = toml::from_str(&text).unwrap();
        BTreeMap::from([(name.to_owned(), s)])
    }

    /// Parse a `-c key=value` the way codex does: the value as TOML.
    fn parsed(arg: &str) -> (String, toml::Value) {
        let (k, v) = arg.split_once('=').unwrap();
        let doc: toml::Table = toml::from_str(&format!("v = {v}")).unwrap();
        (k.to_owned(), doc["v"].clone())
    }

    #[test]
    fn provider_overrides_parse_as_toml() {
        assert!(provider_args(None, false).is_empty());
        let a = provider_args(Some("http://127.0.0.1:9/v1"), true);
        let kv: Vec<_> = a.chunks(2).map(|c| parsed(&c[1])).collect();
        assert!(a.chunks(2).all(|c| c[0] == "-c"));
        assert!(kv.contains(&("model_provider".into(), toml::Value::String("sbx".into()))));
        assert!(kv.contains(&(
            "model_providers.sbx.base_url".into(),
            toml::Value::String("http://127.0.0.1:9/v1".into())
        )));
        assert!(!a.iter().any(|x| x.contains("requires_openai_auth")));
        let a = provider_args(Some("http://h/v1"), false);
        assert!(a.iter().any(|x| x.contains("requires_openai_auth=true")));
    }

    #[test]
    fn host_tools_relay_gets_its_socket_variable() {
        let a = mcp_args(&BTreeMap::new(), true).unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[0], "-c");
        let (k, v) = parsed(&a[1]);
        assert_eq!(k, "mcp_servers.sbx-host");
        assert_eq!(v["command"].as_str(), Some("/usr/local/bin/sbx-guest"));
        assert_eq!(v["args"][0].as_str(), Some("mcp-host-tools"));
        assert_eq!(
            v["env_vars"][0].as_str(),
            Some(sbx_core::hosttools::SOCKET_ENV)
        );
        assert!(mcp_args(&BTreeMap::new(), false).unwrap().is_empty());
    }

    #[test]
    fn values_are_toml_quoted_as_written() {
        let m = mcp(
            "docs",
            &["npx", "a \"quoted\" arg", "back\\slash", "$(id)"],
            &[("TOKEN", "x\ny")],
        );
        let a = mcp_args(&m, false).unwrap();
        let (k, v) = parsed(&a[1]);
        assert_eq!(k, "mcp_servers.docs");
        assert_eq!(v["command"].as_str(), Some("npx"));
        let args: Vec<&str> = v["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        assert_eq!(args, ["a \"quoted\" arg", "back\\slash", "$(id)"]);
        assert_eq!(v["env"]["TOKEN"].as_str(), Some("x\ny"));
    }

    #[test]
    fn names_codex_would_split_are_refused() {
        for bad in ["a.b", "a b", "ü"] {
            let e = mcp_args(&mcp(bad, &["cat"], &[]), false).unwrap_err();
            assert!(e.contains(&format!("[agent.mcp.{bad}]")), "{e}");
        }
        assert!(mcp_args(&mcp("ok_name-1", &["cat"], &[]), false).is_ok());
    }
}
