//! `show-run --format k8s|pod|k8s-template`, the real binary (no engine,
//! no cluster): every manifest validates against the upstream agent-sandbox
//! CRDs' and Kubernetes' own schemas (tests/fixtures/k8s, sources and
//! licenses in its README), the pod keeps every mount and privilege of the
//! `docker run` the same workspace gets, the output matches its golden
//! file, and every config key either has its pod-spec meaning asserted or
//! is refused.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use common::{run_flag_values, sbx_run};

const REPO: &str = "https://git.example.invalid/demo.git";
const FORMATS: [&str; 3] = ["k8s", "pod", "k8s-template"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/k8s")
}

fn git(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {o:?}");
}

/// A checkout `demo` on branch main with `config` committed, a secret
/// left untracked (masked) and one the config's example blocks.
struct Ws {
    dir: tempfile::TempDir,
    path: PathBuf,
    config: String,
}

fn workspace(config: &str) -> Ws {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo");
    std::fs::create_dir_all(path.join(".agent-sandbox")).unwrap();
    std::fs::create_dir_all(path.join("config/deploy")).unwrap();
    std::fs::create_dir_all(path.join(".github/workflows")).unwrap();
    git(&path, &["init", "-q", "-b", "main"]);
    std::fs::write(path.join("README.md"), "demo\n").unwrap();
    std::fs::write(path.join(".github/workflows/ci.yml"), "on: push\n").unwrap();
    std::fs::write(path.join("Makefile"), "all:\n").unwrap();
    std::fs::write(path.join(".agent-sandbox/config.toml"), config).unwrap();
    git(&path, &["add", "."]);
    git(&path, &["commit", "-qm", "init"]);
    std::fs::write(path.join(".env"), "TOKEN=1\n").unwrap();
    std::fs::write(path.join(".env.test"), "TOKEN=test\n").unwrap();
    std::fs::write(path.join("config/deploy/prod.env"), "TOKEN=2\n").unwrap();
    Ws {
        dir,
        path,
        config: config.to_owned(),
    }
}

fn show(ws: &Ws, args: &[&str]) -> Output {
    sbx_run(ws.dir.path())
        .arg("show-run")
        .args(args)
        .arg(&ws.path)
        .output()
        .unwrap()
}

fn manifests(ws: &Ws, format: &str) -> Vec<Value> {
    let o = show(ws, &["--json", "--format", format, "--repo", REPO]);
    assert!(
        o.status.success(),
        "{format}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let line: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(line["type"], "show-run");
    line["data"]["manifests"].as_array().unwrap().clone()
}

fn kind<'a>(docs: &'a [Value], k: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == k)
        .unwrap_or_else(|| panic!("no {k} in {docs:#?}"))
}

/// The pod spec of any format.
fn pod_spec(docs: &[Value]) -> &Value {
    for d in docs {
        match d["kind"].as_str() {
            Some("Pod") => return &d["spec"],
            Some("Sandbox" | "SandboxTemplate") => return &d["spec"]["podTemplate"]["spec"],
            _ => {}
        }
    }
    panic!("no pod in {docs:#?}")
}

fn container<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec["containers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["initContainers"].as_array().unwrap())
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

// ---- schemas ------------------------------------------------------------

struct Validator {
    schemas: boon::Schemas,
    by_kind: BTreeMap<&'static str, boon::SchemaIndex>,
    pod_spec: boon::SchemaIndex,
    pvc_spec: boon::SchemaIndex,
    object_meta: boon::SchemaIndex,
}

const DEFS: &str = "https://kubernetes.io/api/_definitions.json";

/// What the API server does not do for a CRD, done here: an object
/// schema that lists its properties gets `additionalProperties: false`,
/// so a misspelt field fails instead of being pruned without a word.
fn strict(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.contains_key("properties")
                && !m.contains_key("additionalProperties")
                && !m.contains_key("x-kubernetes-preserve-unknown-fields")
            {
                m.insert("additionalProperties".into(), json!(false));
            }
            for (_, x) in m.iter_mut() {
                strict(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strict),
        _ => {}
    }
}

fn validator() -> Validator {
    let read = |f: &str| -> Value {
        serde_json::from_slice(&std::fs::read(fixtures().join(f)).unwrap()).unwrap()
    };
    let mut c = boon::Compiler::new();
    let mut schemas = boon::Schemas::new();
    c.add_resource(DEFS, read("_definitions.json")).unwrap();
    let mut by_kind = BTreeMap::new();
    for (k, f) in [
        ("Pod", "pod-v1.json"),
        ("PersistentVolumeClaim", "persistentvolumeclaim-v1.json"),
        ("NetworkPolicy", "networkpolicy-networking-v1.json"),
        ("ConfigMap", "configmap-v1.json"),
    ] {
        let s = read(f);
        let id = s["$id"].as_str().unwrap().to_owned();
        c.add_resource(&id, s).unwrap();
        by_kind.insert(k, c.compile(&id, &mut schemas).unwrap());
    }
    for (k, f) in [
        ("Sandbox", "agents.x-k8s.io_sandboxes.v1beta1.json"),
        (
            "SandboxTemplate",
            "extensions.agents.x-k8s.io_sandboxtemplates.v1beta1.json",
        ),
        (
            "SandboxWarmPool",
            "extensions.agents.x-k8s.io_sandboxwarmpools.v1beta1.json",
        ),
        (
            "VolumeSnapshot",
            "snapshot.storage.k8s.io_volumesnapshots.v1.json",
        ),
    ] {
        let crd = read(f);
        let mut s = crd["openAPIV3Schema"].clone();
        strict(&mut s);
        s["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
        let id = format!("https://crd.sbx.invalid/{k}");
        c.add_resource(&id, s).unwrap();
        by_kind.insert(k, c.compile(&id, &mut schemas).unwrap());
    }
    let def = |c: &mut boon::Compiler, s: &mut boon::Schemas, n: &str| {
        c.compile(&format!("{DEFS}#/$defs/{n}"), s).unwrap()
    };
    let pod_spec = def(&mut c, &mut schemas, "io.k8s.api.core.v1.PodSpec");
    let pvc_spec = def(
        &mut c,
        &mut schemas,
        "io.k8s.api.core.v1.PersistentVolumeClaimSpec",
    );
    let object_meta = def(
        &mut c,
        &mut schemas,
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    );
    Validator {
        schemas,
        by_kind,
        pod_spec,
        pvc_spec,
        object_meta,
    }
}

impl Validator {
    fn check(&self, idx: boon::SchemaIndex, v: &Value, what: &str) -> Result<(), String> {
        self.schemas
            .validate(v, idx)
            .map_err(|e| format!("{what}: {e:#}"))
    }

    /// The object's kind schema, its metadata as ObjectMeta, and a pod
    /// template's spec and claims against the core schemas as well.
    fn validate(&self, doc: &Value) -> Result<(), String> {
        let k = doc["kind"].as_str().unwrap_or_default();
        let idx = *self.by_kind.get(k).ok_or(format!("unknown kind {k}"))?;
        self.check(idx, doc, k)?;
        self.check(self.object_meta, &doc["metadata"], "metadata")?;
        if matches!(k, "Sandbox" | "SandboxTemplate") {
            let spec = &doc["spec"]["podTemplate"]["spec"];
            self.check(self.pod_spec, spec, "podTemplate.spec")?;
            for v in doc["spec"]["volumeClaimTemplates"].as_array().unwrap() {
                self.check(self.pvc_spec, &v["spec"], "volumeClaimTemplates[].spec")?;
            }
        }
        Ok(())
    }
}

/// What the API server checks beyond the schema, for what we emit: names
/// are DNS labels, a mount names a volume (or a claim template), no two
/// mounts share a path, subPaths stay inside.
fn references_hold(doc: &Value) -> Result<(), String> {
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    // Objects take DNS subdomains; a Sandbox's or Pod's name is also the
    // pod's and a label value, so a label.
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    // (IsDNS1123Subdomain: no length limit on its parts.)
    let part = |s: &str| label(&s.chars().take(63).collect::<String>());
    let subdomain = name.len() <= 253 && name.split('.').all(part);
    let pod = matches!(doc["kind"].as_str(), Some("Pod" | "Sandbox"));
    if !subdomain || (pod && !label(name)) {
        return Err(format!("object name {name:?} is not a DNS name"));
    }
    let (spec, claims): (&Value, Vec<String>) = match doc["kind"].as_str() {
        Some("Pod") => (&doc["spec"], Vec::new()),
        Some("Sandbox" | "SandboxTemplate") => (
            &doc["spec"]["podTemplate"]["spec"],
            doc["spec"]["volumeClaimTemplates"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["metadata"]["name"].as_str().unwrap().to_owned())
                .collect(),
        ),
        _ => return Ok(()),
    };
    let mut volumes: BTreeSet<String> = claims.into_iter().collect();
    for v in spec["volumes"].as_array().unwrap() {
        let n = v["name"].as_str().unwrap();
        if !label(n) || !volumes.insert(n.to_owned()) {
            return Err(format!("volume {n:?}: not a DNS label, or twice"));
        }
    }
    let mut names = BTreeSet::new();
    for c in spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["containers"].as_array().unwrap())
    {
        let cn = c["name"].as_str().unwrap();
        if !label(cn) || !names.insert(cn) {
            return Err(format!("container {cn:?}: not a DNS label, or twice"));
        }
        let mut paths = BTreeSet::new();
        for m in c["volumeMounts"].as_array().unwrap() {
            let p = m["mountPath"].as_str().unwrap();
            if !volumes.contains(m["name"].as_str().unwrap()) {
                return Err(format!("{cn}: {p} mounts no volume: {m}"));
            }
            if !paths.insert(p) {
                return Err(format!("{cn}: {p} is mounted twice"));
            }
            if let Some(sub) = m["subPath"].as_str()
                && (sub.starts_with('/') || sub.split('/').any(|c| c == ".."))
            {
                return Err(format!("{cn}: subPath {sub:?} leaves its volume"));
            }
        }
    }
    Ok(())
}

const SAMPLE: &str = r#"[sandbox]
ports = ["3000"]
protected = [".github/workflows", "Makefile"]

[network]
allow-domains = ["api.example.com"]

[tools]
disallowed = ["Bash(curl:*)"]
"#;

#[test]
fn every_manifest_validates_against_the_upstream_schemas() {
    let v = validator();
    let ws = workspace(SAMPLE);
    let mut kinds = BTreeSet::new();
    for f in FORMATS {
        for doc in manifests(&ws, f) {
            let k = doc["kind"].as_str().unwrap().to_owned();
            v.validate(&doc).unwrap_or_else(|e| panic!("{f}: {e}"));
            references_hold(&doc).unwrap_or_else(|e| panic!("{f}: {k}: {e}"));
            kinds.insert(k);
        }
    }
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "NetworkPolicy",
            "PersistentVolumeClaim",
            "Pod",
            "Sandbox",
            "SandboxTemplate",
            "SandboxWarmPool"
        ]
        .map(String::from)
        .into(),
    );
}

/// The validator itself: a misspelt field and a wrong type are caught,
/// in the CRD (strict) and in the core schemas.
#[test]
fn the_schemas_catch_a_misspelt_field() {
    let v = validator();
    let ws = workspace(SAMPLE);
    for f in FORMATS {
        let docs = manifests(&ws, f);
        let mut d = docs
            .iter()
            .find(|d| {
                matches!(
                    d["kind"].as_str(),
                    Some("Pod" | "Sandbox" | "SandboxTemplate")
                )
            })
            .unwrap()
            .clone();
        let spec = match d["kind"].as_str() {
            Some("Pod") => &mut d["spec"],
            _ => &mut d["spec"]["podTemplate"]["spec"],
        };
        spec["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = json!(true);
        assert!(v.validate(&d).is_err(), "{f}: a misspelt field passed");
        // The CRD's schema alone: made strict here, since the API server
        // would prune the field without a word.
        let k = d["kind"].as_str().unwrap();
        if k != "Pod" {
            assert!(
                v.check(v.by_kind[k], &d, k).is_err(),
                "{f}: the CRD schema took a misspelt field"
            );
        }
        let mut d = docs
            .iter()
            .find(|d| d["kind"] == "NetworkPolicy" || d["kind"] == "SandboxTemplate")
            .unwrap()
            .clone();
        if d["kind"] == "NetworkPolicy" {
            d["spec"]["policyTypes"] = json!("Egress");
        } else {
            d["spec"]["networkPolicyManagement"] = json!("Sometimes");
        }
        assert!(v.validate(&d).is_err(), "{f}: a wrong value passed");
    }
}

/// The text output is the same objects as the JSON, as YAML documents a
/// YAML reader takes back unchanged (every string quoted).
#[test]
fn the_yaml_is_the_json() {
    use saphyr::{LoadableYamlNode, Yaml};
    fn to_json(y: &Yaml) -> Value {
        match y {
            Yaml::Mapping(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.as_str().unwrap().to_owned(), to_json(v)))
                    .collect(),
            ),
            Yaml::Sequence(s) => Value::Array(s.iter().map(to_json).collect()),
            Yaml::Value(saphyr::Scalar::String(s)) => json!(s),
            Yaml::Value(saphyr::Scalar::Integer(i)) => json!(i),
            Yaml::Value(saphyr::Scalar::Boolean(b)) => json!(b),
            Yaml::Value(saphyr::Scalar::FloatingPoint(f)) => json!(f.into_inner()),
            other => panic!("unexpected YAML node {other:?}"),
        }
    }
    let ws = workspace(SAMPLE);
    for f in FORMATS {
        let o = show(&ws, &["--format", f, "--repo", REPO]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = String::from_utf8(o.stdout).unwrap();
        let docs = Yaml::load_from_str(&text).unwrap();
        let got: Vec<Value> = docs.iter().map(to_json).collect();
        assert_eq!(got, manifests(&ws, f), "{f}");
        // A YAML 1.1 reader's bool and number spellings stay strings.
        for line in text.lines().filter(|l| l.trim_start().starts_with("- ")) {
            let item = line.trim_start().trim_start_matches("- ");
            assert!(
                item.starts_with('"') || item.contains(':') || item.parse::<i64>().is_ok(),
                "unquoted list string: {line}"
            );
        }
    }
}

/// The pod gets what `docker run` gets: every mount target with the same
/// read-only flag, the same capabilities, no new privileges, the same
/// command and environment (docker's run line in branch mode, printed by
/// the same binary for the same workspace).
#[test]
fn the_pod_keeps_every_mount_and_privilege_of_docker_run() {
    let ws = workspace(SAMPLE);
    let o = show(&ws, &["--branch", "main"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let docker = String::from_utf8(o.stdout).unwrap();
    for f in FORMATS {
        let docs = manifests(&ws, f);
        let spec = pod_spec(&docs);
        let main = container(spec, "sandbox");
        let mounts: BTreeMap<String, bool> = main["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["mountPath"].as_str().unwrap().to_owned(),
                    m["readOnly"].as_bool().unwrap_or(false),
                )
            })
            .collect();
        let mut want = BTreeMap::new();
        for m in run_flag_values(&docker, "--mount") {
            let target = m
                .split(',')
                .find_map(|f| f.trim_matches('"').strip_prefix("target="))
                .unwrap()
                .to_owned();
            want.insert(target, m.split(',').any(|f| f == "readonly"));
        }
        assert!(!want.is_empty());
        assert_eq!(mounts, want, "{f}: the pod's mounts are not docker's");
        let sc = &main["securityContext"];
        assert_eq!(
            strings(&sc["capabilities"]["add"]),
            run_flag_values(&docker, "--cap-add"),
            "{f}"
        );
        assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
        assert_eq!(
            strings(&main["command"]),
            run_flag_values(&docker, "--entrypoint")
        );
        let env: Vec<String> = main["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                format!(
                    "{}={}",
                    e["name"].as_str().unwrap(),
                    e["value"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(env, run_flag_values(&docker, "--env"), "{f}");
        assert_eq!(
            main["workingDir"].as_str(),
            run_flag_values(&docker, "--workdir")
                .first()
                .map(String::as_str)
        );
        // The firewall's init container: NET_ADMIN and NET_RAW, and (proxy
        // mode, the default) SETUID/SETGID to start the proxy as its uid.
        let fw = container(spec, "firewall");
        assert_eq!(strings(&fw["command"]), ["/usr/local/bin/sbx-fw", "init"]);
        assert_eq!(
            strings(&fw["securityContext"]["capabilities"]["add"]),
            ["NET_ADMIN", "NET_RAW", "SETUID", "SETGID"]
        );
        assert_eq!(
            strings(&fw["securityContext"]["capabilities"]["drop"]),
            ["ALL"]
        );
        // The clone: the agent's uid, nothing else.
        let clone = container(spec, "clone");
        let csc = &clone["securityContext"];
        assert_eq!(csc["runAsNonRoot"], true);
        assert_eq!(csc["runAsUser"], 1000);
        assert_eq!(csc["readOnlyRootFilesystem"], true);
        assert_eq!(strings(&csc["capabilities"]["add"]), Vec::<String>::new());
        assert!(strings(&clone["args"]).contains(&REPO.to_owned()));
        // Order: claims seeded, then the clone, then the firewall.
        let order: Vec<&str> = spec["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(order, ["seed", "clone", "firewall"]);
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(
            spec["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
    }
}

/// Ingress only from sbx-server's pods; egress anywhere but the ranges
/// sbx-fw never allows (private, link-local with the metadata address),
/// plus the cluster's DNS.
#[test]
fn the_network_policy_keeps_private_ranges_and_metadata_out() {
    let ws = workspace(SAMPLE);
    for f in FORMATS {
        let docs = manifests(&ws, f);
        let np = match f {
            "k8s-template" => kind(&docs, "SandboxTemplate")["spec"]["networkPolicy"].clone(),
            _ => kind(&docs, "NetworkPolicy")["spec"].clone(),
        };
        if f != "k8s-template" {
            assert_eq!(strings(&np["policyTypes"]), ["Ingress", "Egress"]);
        }
        let ingress = np["ingress"].as_array().unwrap();
        assert_eq!(ingress.len(), 1, "{np}");
        assert_eq!(
            ingress[0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
            "sbx-server"
        );
        assert_eq!(
            ingress[0]["ports"],
            json!([{"port": 3000, "protocol": "TCP"}])
        );
        let blocks: Vec<&Value> = np["egress"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["to"].as_array().unwrap())
            .filter(|p| p.get("ipBlock").is_some())
            .collect();
        let except: Vec<String> = blocks
            .iter()
            .flat_map(|b| strings(&b["ipBlock"]["except"]))
            .collect();
        for must in [
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "169.254.0.0/16",
            "100.64.0.0/10",
            "fc00::/7",
            "fe80::/10",
        ] {
            assert!(
                except.contains(&must.to_owned()),
                "{f}: {must} not excepted: {np}"
            );
        }
        assert_eq!(
            blocks
                .iter()
                .map(|b| b["ipBlock"]["cidr"].as_str().unwrap())
                .collect::<Vec<_>>(),
            ["0.0.0.0/0", "::/0"]
        );
    }
}

// ---- golden files -------------------------------------------------------

/// The printed manifests, with what depends on the test's directory
/// replaced: `SBX_BLESS=1` writes them anew.
#[test]
fn the_output_matches_its_golden_file() {
    let ws = workspace(SAMPLE);
    for f in FORMATS {
        let o = show(&ws, &["--format", f, "--repo", REPO]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let docs = manifests(&ws, f);
        let hash = docs[0]["metadata"]["labels"]["sbx.dev/workspace-hash"]
            .as_str()
            .unwrap()
            .to_owned();
        let text = String::from_utf8(o.stdout)
            .unwrap()
            .replace(&ws.dir.path().to_string_lossy().into_owned(), "/TMP")
            .replace(&hash, "HASH");
        let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(format!("show-run-{f}.yaml"));
        if std::env::var_os("SBX_BLESS").is_some() {
            std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
            std::fs::write(&golden, &text).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&golden)
            .unwrap_or_else(|e| panic!("{}: {e} (SBX_BLESS=1 writes it)", golden.display()));
        assert!(
            text == want,
            "{f}: differs from {} (SBX_BLESS=1 writes it anew):\n{text}",
            golden.display()
        );
    }
}

const SNAP: &str = "20261130t070000000-00ab";

/// A snapshot on a cluster (docs/kubernetes.md, Snapshots): the
/// VolumeSnapshots of a Sandbox's home, shelf and git record, and the
/// manifests of both formats that start from one (the claims'
/// `dataSource`): each validates against its CRD's schema
/// (external-snapshotter's VolumeSnapshot, agent-sandbox's Sandbox) and
/// the core ones, names the claims the controller makes, and matches
/// its golden file.
#[test]
fn snapshots_on_a_cluster_validate_and_match_their_golden_file() {
    use sbx_run::k8s::{from_snapshot, snapshot_name, volume_snapshots};
    let v = validator();
    let ws = workspace(SAMPLE);
    let docs = manifests(&ws, "k8s");
    let sandbox = kind(&docs, "Sandbox");
    let name = sandbox["metadata"]["name"].as_str().unwrap();
    let vss = volume_snapshots(sandbox, SNAP, Some("before the upgrade"));
    let claims: Vec<String> = vss
        .iter()
        .map(|d| {
            d["metadata"]["labels"]["sbx.dev/claim"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(claims, ["home", "shelf", "git-record"]);
    for (d, c) in vss.iter().zip(&claims) {
        v.validate(d).unwrap_or_else(|e| panic!("{e}"));
        references_hold(d).unwrap();
        assert_eq!(d["metadata"]["name"], snapshot_name(name, SNAP, c));
        assert_eq!(d["metadata"]["labels"]["sbx.dev/sandbox"], name);
        assert_eq!(d["metadata"]["labels"]["sbx.dev/snapshot"], SNAP);
        assert_eq!(
            d["metadata"]["annotations"]["sbx.dev/snapshot-tag"],
            "before the upgrade"
        );
        // The CRD's CEL rule (not evaluated here): one source exactly,
        // the claim the controller makes for the template.
        let src = d["spec"]["source"].as_object().unwrap();
        assert_eq!(src.len(), 1, "{d}");
        assert_eq!(src["persistentVolumeClaimName"], format!("{c}-{name}"));
        assert!(
            sandbox["spec"]["volumeClaimTemplates"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["metadata"]["name"] == c.as_str()),
            "{c} is no claim of the Sandbox"
        );
    }
    // The validator catches a misspelt field of the CRD (made strict).
    let mut bad = vss[0].clone();
    bad["spec"]["source"]["persistentVolumeClaimname"] = json!("x");
    assert!(v.validate(&bad).is_err(), "a misspelt field passed");

    let mut restored = BTreeMap::new();
    for f in ["k8s", "pod"] {
        let mut docs = manifests(&ws, f);
        from_snapshot(&mut docs, SNAP, &claims);
        let mut from = BTreeMap::new();
        for d in &docs {
            v.validate(d).unwrap_or_else(|e| panic!("{f}: {e}"));
            references_hold(d).unwrap_or_else(|e| panic!("{f}: {e}"));
            let specs: Vec<(String, &Value)> = match d["kind"].as_str() {
                Some("Sandbox") => d["spec"]["volumeClaimTemplates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| {
                        (
                            t["metadata"]["name"].as_str().unwrap().to_owned(),
                            &t["spec"],
                        )
                    })
                    .collect(),
                Some("PersistentVolumeClaim") => {
                    let n = d["metadata"]["name"].as_str().unwrap();
                    vec![(
                        n.strip_suffix(&format!("-{name}")).unwrap().to_owned(),
                        &d["spec"],
                    )]
                }
                _ => continue,
            };
            for (c, spec) in specs {
                from.insert(c, spec["dataSource"].clone());
            }
        }
        for (c, src) in &from {
            if claims.contains(c) {
                assert_eq!(
                    src,
                    &json!({"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                            "name": snapshot_name(name, SNAP, c)}),
                    "{f}: {c}"
                );
            } else {
                assert!(src.is_null(), "{f}: {c} is not in a snapshot: {src}");
            }
        }
        assert!(from.len() > claims.len(), "{f}: {from:?}");
        restored.insert(f, docs);
    }

    let hash = sandbox["metadata"]["labels"]["sbx.dev/workspace-hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = serde_json::to_string_pretty(&json!({
        "volumeSnapshots": vss,
        "startFromSnapshot": kind(&restored["k8s"], "Sandbox")["spec"]["volumeClaimTemplates"],
    }))
    .unwrap()
    .replace(&ws.dir.path().to_string_lossy().into_owned(), "/TMP")
    .replace(&hash, "HASH")
        + "\n";
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/k8s-snapshot.json");
    if std::env::var_os("SBX_BLESS").is_some() {
        std::fs::write(&golden, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&golden)
        .unwrap_or_else(|e| panic!("{}: {e} (SBX_BLESS=1 writes it)", golden.display()));
    assert!(
        text == want,
        "differs from {} (SBX_BLESS=1 writes it anew):\n{text}",
        golden.display()
    );
}

// ---- the table over every config key -----------------------------------

/// docs/config.md's keys and their examples (`[section] key` -> `key = v`).
fn documented_keys() -> Vec<(String, String, String)> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/config.md"))
            .unwrap();
    let mut out = Vec::new();
    let mut cur: Option<(String, String)> = None;
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("### `[") {
            cur = h
                .split_once("] ")
                .map(|(s, k)| (s.to_owned(), k.trim_end_matches('`').to_owned()));
        } else if let Some(ex) = line.strip_prefix("- example: `")
            && let Some((s, k)) = cur.take()
        {
            out.push((s, k, ex.trim_end_matches('`').to_owned()));
        }
    }
    out
}

/// A config that sets `key` (a NAME table gets every key's example).
fn config_setting(section: &str, key: &str, all: &[(String, String, String)]) -> String {
    let table = section.replace(".NAME", ".x");
    let lines: Vec<&str> = if section.ends_with(".NAME") {
        all.iter()
            .filter(|(s, _, _)| s == section)
            .map(|(_, _, e)| e.as_str())
            .collect()
    } else {
        all.iter()
            .filter(|(s, k, _)| s == section && k == key)
            .map(|(_, _, e)| e.as_str())
            .collect()
    };
    format!("[{table}]\n{}\n", lines.join("\n"))
}

/// Each key with a pod-spec meaning: that meaning, asserted.
fn assert_meaning(section: &str, key: &str, ws: &Ws, docs: &[Value]) {
    let spec = pod_spec(docs);
    let main = container(spec, "sandbox");
    let mount = |p: &str| -> Option<&Value> {
        main["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == p)
    };
    let t = "/workspace/demo";
    let cm = kind(docs, "ConfigMap");
    match (section, key) {
        ("sandbox", "memory") => {
            assert_eq!(main["resources"]["limits"]["memory"], "8589934592");
            assert_eq!(main["resources"]["requests"]["memory"], "8589934592");
        }
        ("sandbox", "cpus") => assert_eq!(main["resources"]["limits"]["cpu"], "1500m"),
        ("sandbox", "ports") => {
            let ports: Vec<i64> = main["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["containerPort"].as_i64().unwrap())
                .collect();
            assert_eq!(ports, [3000, 80]);
        }
        ("sandbox", "protected") => {
            for p in [".github/workflows", "Makefile"] {
                let m = mount(&format!("{t}/{p}")).unwrap_or_else(|| panic!("{p} not mounted"));
                assert_eq!(m["readOnly"], true, "{m}");
            }
        }
        ("sandbox", "workspace") | ("tools", "read-only") => {
            let m = mount(t).unwrap();
            assert_eq!(m["name"], "workspace");
            assert_eq!(m["readOnly"], true, "{m}");
        }
        ("filesystem", "blocked") => {
            let m = mount(&format!("{t}/config/deploy/prod.env")).expect("blocked file masked");
            assert_eq!(
                (&m["name"], &m["subPath"], &m["readOnly"]),
                (&json!("files"), &json!("empty"), &json!(true))
            );
            assert_eq!(cm["data"]["empty"], "");
        }
        ("filesystem", "allowed") => {
            assert!(
                mount(&format!("{t}/.env.test")).is_none(),
                ".env.test is allowed"
            );
            assert!(mount(&format!("{t}/.env")).is_some(), ".env stays masked");
        }
        ("network", "mode") => {
            // The example is address mode (proxy is the default): no
            // proxy to start under its own uid, so no SETUID/SETGID.
            let fw = container(spec, "firewall");
            assert_eq!(
                strings(&fw["securityContext"]["capabilities"]["add"]),
                ["NET_ADMIN", "NET_RAW"]
            );
        }
        ("tools", "disallowed" | "allowed" | "deny-read") => {
            let m = mount("/etc/claude-code").expect("managed settings mounted");
            assert_eq!(m["readOnly"], true);
            let text = cm["data"]["claude-code.managed-settings.json"]
                .as_str()
                .unwrap();
            // The CLI's own deny list, and its hook to sbx-tool-guard,
            // which reads the rest from /.agent-sandbox (asserted below).
            if key == "disallowed" {
                assert!(text.contains("Bash(curl:*)"), "{text}");
            }
            assert!(text.contains("/usr/local/bin/sbx-tool-guard"), "{text}");
        }
        _ => panic!("[{section}] {key}: a pod-spec meaning with no assertion here"),
    }
    let _ = ws;
}

#[test]
fn every_config_key_has_a_pod_spec_meaning_or_is_refused() {
    use sbx_run::k8s::{KEYS, Meaning};
    let all = documented_keys();
    let documented: BTreeSet<(String, String)> =
        all.iter().map(|(s, k, _)| (s.clone(), k.clone())).collect();
    let table: BTreeSet<(String, String)> = KEYS
        .iter()
        .map(|(s, k, _)| ((*s).to_owned(), (*k).to_owned()))
        .collect();
    assert_eq!(documented, table, "k8s::KEYS and docs/config.md disagree");
    for (section, key, meaning) in KEYS {
        let config = config_setting(section, key, &all);
        let ws = workspace(&config);
        for f in FORMATS {
            let o = show(&ws, &["--json", "--format", f, "--repo", REPO]);
            let err = String::from_utf8_lossy(&o.stderr);
            match meaning {
                Meaning::Refused(_) => {
                    let name = match section.strip_suffix(".NAME") {
                        Some(s) => format!("[{s}]"),
                        None => format!("[{section}].{key}"),
                    };
                    assert_eq!(o.status.code(), Some(78), "[{section}] {key} ({f}): {err}");
                    assert!(o.stdout.is_empty(), "[{section}] {key}: printed anyway");
                    assert!(
                        err.contains(&name) && err.contains("no Kubernetes meaning"),
                        "[{section}] {key}: {err}"
                    );
                    assert_eq!(err.lines().count(), 1, "one line: {err}");
                }
                Meaning::InPod | Meaning::PodSpec(_) => {
                    assert!(
                        o.status.success(),
                        "[{section}] {key} ({f}): {err}\n{config}"
                    );
                    let line: Value = serde_json::from_slice(&o.stdout).unwrap();
                    let docs = line["data"]["manifests"].as_array().unwrap();
                    // In every case the guest reads the very file.
                    assert_eq!(kind(docs, "ConfigMap")["data"]["config.toml"], ws.config);
                    let spec = pod_spec(docs);
                    for c in ["sandbox", "firewall"] {
                        let m = container(spec, c)["volumeMounts"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|m| m["mountPath"] == "/.agent-sandbox")
                            .cloned()
                            .unwrap_or_else(|| panic!("{c}: no /.agent-sandbox"));
                        assert_eq!(
                            (&m["name"], &m["readOnly"]),
                            (&json!("config"), &json!(true))
                        );
                    }
                    if let Meaning::PodSpec(_) = meaning {
                        assert_meaning(section, key, &ws, docs);
                    }
                }
            }
        }
    }
}

/// Without --repo there is nothing to clone: a usage error, not a guess.
#[test]
fn a_cluster_needs_the_repository_to_clone() {
    let ws = workspace(SAMPLE);
    let o = show(&ws, &["--format", "k8s"]);
    assert_eq!(o.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--repo"));
    assert!(o.stdout.is_empty());
    let o = show(&ws, &["--repo", REPO]);
    assert_eq!(o.status.code(), Some(64), "--repo without a k8s format");
    // A token in the URL would be printed into the manifests.
    let o = show(
        &ws,
        &[
            "--format",
            "k8s",
            "--repo",
            "https://u:tok3n@git.example.invalid/demo.git",
        ],
    );
    assert_eq!(o.status.code(), Some(64));
    assert!(o.stdout.is_empty());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("tok3n"));
    let o = show(&ws, &["--json", "--format", "k8s-template", "--repo", REPO]);
    let line: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(line["data"]["format"], "k8s-template");
}

// ---- the init containers' scripts, run ---------------------------------

/// An init container's `sh -c SCRIPT NAME ARGS…`, split.
fn script(c: &Value) -> (String, Vec<String>) {
    assert_eq!(strings(&c["command"]), ["/bin/sh", "-c"]);
    let mut a = strings(&c["args"]);
    let s = a.remove(0);
    (s, a)
}

/// The clone container's script with a real sh and git, from a local
/// repository: it clones the branch into the (empty) workspace and makes
/// the mount points the pod's mounts need, leaving what exists alone.
#[test]
fn the_clone_script_clones_and_makes_the_mount_points() {
    let ws = workspace(SAMPLE);
    let url = format!("file://{}", ws.path.display());
    let o = show(&ws, &["--json", "--format", "pod", "--repo", &url]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line: Value = serde_json::from_slice(&o.stdout).unwrap();
    let docs = line["data"]["manifests"].as_array().unwrap();
    let clone = container(pod_spec(docs), "clone");
    let (text, mut args) = script(clone);
    assert_eq!(
        args[..4],
        ["sbx-clone", url.as_str(), "main", "/workspace/demo"]
    );
    let points: Vec<String> = args[4..].to_vec();
    assert!(points.contains(&"f:.env".to_owned()), "{points:?}");
    assert!(
        points.contains(&"d:.github/workflows".to_owned()),
        "{points:?}"
    );
    let out = ws.dir.path().join("emptydir");
    std::fs::create_dir(&out).unwrap();
    args[3] = out.to_string_lossy().into_owned();
    let home = ws.dir.path().join("clone-home");
    std::fs::create_dir(&home).unwrap();
    let mut c = std::process::Command::new("/bin/sh");
    c.arg("-c").arg(&text).args(&args).env_clear();
    c.env("PATH", "/usr/bin:/bin");
    for e in clone["env"].as_array().unwrap() {
        c.env(e["name"].as_str().unwrap(), e["value"].as_str().unwrap());
    }
    c.env("HOME", &home);
    let r = c.output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        std::fs::read_to_string(out.join("README.md")).unwrap(),
        "demo\n"
    );
    assert_eq!(
        std::fs::read_to_string(out.join(".github/workflows/ci.yml")).unwrap(),
        "on: push\n",
        "an existing mount point is left as it is"
    );
    assert!(out.join(".git/HEAD").is_file());
    for p in &points {
        let (kind, rel) = p.split_once(':').unwrap();
        let m = std::fs::symlink_metadata(out.join(rel)).unwrap_or_else(|_| panic!("{p} missing"));
        assert_eq!(m.is_dir(), kind == "d", "{p}");
    }
    // The untracked secret's mount point is empty: nothing of the host's.
    assert_eq!(std::fs::read(out.join(".env")).unwrap(), b"");
    // Run again (a restarted pod): the clone is kept.
    let r = c.output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
}

/// The seed container's script: a new claim (empty but for lost+found)
/// gets the image's content with its modes; one with data is untouched.
#[test]
fn the_seed_script_fills_only_new_claims() {
    use std::os::unix::fs::PermissionsExt;
    let ws = workspace(SAMPLE);
    let docs = manifests(&ws, "pod");
    let (text, args) = script(container(pod_spec(&docs), "seed"));
    assert_eq!(args[0], "sbx-seed");
    let pairs: Vec<(&str, &str)> = args[1..]
        .chunks(2)
        .map(|p| (p[0].as_str(), p[1].as_str()))
        .collect();
    assert!(
        pairs.contains(&("/home/agent", "/sbx-seed/home")),
        "{pairs:?}"
    );
    let t = ws.dir.path();
    let img = t.join("image-home");
    std::fs::create_dir_all(img.join(".config")).unwrap();
    std::fs::write(img.join(".bashrc"), "# image\n").unwrap();
    std::fs::set_permissions(img.join(".config"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let new = t.join("claim-new");
    std::fs::create_dir_all(new.join("lost+found")).unwrap();
    let used = t.join("claim-used");
    std::fs::create_dir_all(&used).unwrap();
    std::fs::write(used.join(".bashrc"), "# mine\n").unwrap();
    let r = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&text)
        .arg("sbx-seed")
        .args([&img, &new, &img, &used])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(
        std::fs::read_to_string(new.join(".bashrc")).unwrap(),
        "# image\n"
    );
    let mode = std::fs::metadata(new.join(".config"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(
        std::fs::read_to_string(used.join(".bashrc")).unwrap(),
        "# mine\n"
    );
    assert!(!used.join(".config").exists());
}
