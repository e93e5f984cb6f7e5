//! A snapshot: every path of the home with its POSIX metadata and, for
//! files, the content hash and where the bytes live (a range of a pack, or
//! a blob of their own). Written last, with a conditional put, so a
//! snapshot that can be read is a whole one.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const FORMAT: &str = "sbx-backup";
/// 1: every file is `blobs/<hash>`. 2: small files may live in packs
/// (`pack` + `offset`). 3: a `checksum` of the manifest itself (required),
/// the writing `home` and its `seq`; older manifests are read as they are.
pub const VERSION: u32 = 3;

/// A path relative to the home, as bytes: a string when UTF-8, else
/// `{"b64": …}` so non-UTF-8 names survive the round trip.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(pub Vec<u8>);

impl RelPath {
    pub fn as_path(&self) -> &Path {
        Path::new(std::ffi::OsStr::from_bytes(&self.0))
    }

    /// Relative, no `..`, no `.`, not empty: safe to join under a target.
    pub fn is_safe(&self) -> bool {
        // On the bytes, not Path::components, which hides "a/./b" and "a//b".
        !self.0.is_empty()
            && !self.0.contains(&0)
            && self
                .0
                .split(|b| *b == b'/')
                .all(|c| !c.is_empty() && c != b"." && c != b"..")
    }
}

impl Serialize for RelPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(t) => s.serialize_str(t),
            Err(_) => {
                #[derive(Serialize)]
                struct B64 {
                    b64: String,
                }
                B64 {
                    b64: base64::engine::general_purpose::STANDARD.encode(&self.0),
                }
                .serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for RelPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum P {
            S(String),
            B { b64: String },
        }
        match P::deserialize(d)? {
            P::S(s) => Ok(RelPath(s.into_bytes())),
            P::B { b64 } => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(RelPath)
                .map_err(serde::de::Error::custom),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    File,
    Dir,
    Symlink,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub path: RelPath,
    pub kind: Kind,
    /// Permission bits including setuid/setgid/sticky (st_mode & 0o7777).
    pub mode: u32,
    pub mtime_ns: i128,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub size: u64,
    /// blake3 of the content, hex; files only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The link target verbatim; symlinks only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<RelPath>,
    /// The pack (an index into the manifest's `packs`) holding the content
    /// at `offset` (`size` bytes); absent: the content is `blobs/<hash>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Owner and group at backup: restore keeps set-uid/set-gid bits only
    /// when it restores as this owner (absent in older manifests: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

/// Larger than any file a home holds: a manifest claiming more is hostile
/// or corrupt, and restore would try to allocate or fetch it.
pub const MAX_FILE: u64 = 1 << 42;
/// Packs hold small files (see `sync::PACK_FILE_MAX`), or one large file
/// at offset 0 (a pack of its own: content a prune condemned, stored
/// anew), which restore and check stream. A packed entry claiming more
/// anywhere else is hostile or corrupt.
pub const MAX_PACKED: u64 = 64 << 20;

pub fn is_hash(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub sockets: u64,
    pub fifos: u64,
    pub devices: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub id: String,
    pub created: String,
    pub entries: Vec<Entry>,
    pub skipped: Skipped,
    /// Pack ids (blake3 of the pack, hex) the entries' `pack` indexes name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packs: Vec<String>,
    /// The home that wrote it (`<prefix>/home-id`): one home per prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// Its place in the store's order, taken by a conditional create of
    /// `snapshots/<seq>.json`: the store, not a clock, orders snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// blake3 of the manifest serialised without this field: a flipped
    /// bit that keeps the JSON valid is caught on every read. It detects
    /// corruption, not a forger with write access to the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("snapshot {0}: not an sbx-backup manifest ({1})")]
    Foreign(String, String),
    #[error(
        "snapshot {0}: written by a newer sbx-backup (format version {1}, this one reads {VERSION}); upgrade it"
    )]
    Newer(String, u32),
    #[error("snapshot {0}: corrupted: {1}")]
    Corrupt(String, String),
}

impl Manifest {
    pub fn parse(name: &str, bytes: &[u8]) -> Result<Self, ManifestError> {
        let v: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| ManifestError::Foreign(name.into(), e.to_string()))?;
        if v.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(ManifestError::Foreign(
                name.into(),
                "no \"format\": \"sbx-backup\"".into(),
            ));
        }
        let version = v.get("version").and_then(|f| f.as_u64()).unwrap_or(0) as u32;
        if version > VERSION {
            return Err(ManifestError::Newer(name.into(), version));
        }
        let mut m: Manifest = serde_json::from_value(v)
            .map_err(|e| ManifestError::Corrupt(name.into(), e.to_string()))?;
        if version >= 3 || m.checksum.is_some() {
            let want = m.checksum.take();
            let got = m.digest();
            if want.as_deref() != Some(got.as_str()) {
                return Err(ManifestError::Corrupt(
                    name.into(),
                    "checksum mismatch (the manifest was changed after it was written)".into(),
                ));
            }
            m.checksum = want;
        }
        m.check()
            .map_err(|e| ManifestError::Corrupt(name.into(), e))?;
        Ok(m)
    }

    /// Paths are safe and unique, files have hashes, nothing sits below a
    /// symlink (restoring it would write through the link).
    pub fn check(&self) -> Result<(), String> {
        if let Some(p) = self.packs.iter().find(|p| !is_hash(p)) {
            return Err(format!("invalid pack id {p:?}"));
        }
        let mut links = std::collections::HashSet::new();
        let mut seen = std::collections::HashSet::new();
        for e in &self.entries {
            if !e.path.is_safe() {
                return Err(format!("unsafe path {:?}", e.path.as_path()));
            }
            if e.mode > 0o7777 {
                return Err(format!("{:?} has mode {:o}", e.path.as_path(), e.mode));
            }
            if e.kind != Kind::File && (e.size != 0 || e.hash.is_some() || e.pack.is_some()) {
                return Err(format!(
                    "{:?} is not a file but has content",
                    e.path.as_path()
                ));
            }
            if !seen.insert(&e.path) {
                return Err(format!("duplicate path {:?}", e.path.as_path()));
            }
            match e.kind {
                Kind::File if e.hash.as_deref().is_none_or(|h| !is_hash(h)) => {
                    return Err(format!("file {:?} has no valid hash", e.path.as_path()));
                }
                Kind::File
                    if e.pack.is_some_and(|p| p as usize >= self.packs.len())
                        || e.pack.is_some() != e.offset.is_some() =>
                {
                    return Err(format!(
                        "file {:?} has an invalid pack location",
                        e.path.as_path()
                    ));
                }
                Kind::File if e.size > MAX_FILE => {
                    return Err(format!(
                        "file {:?} claims {} bytes (more than {MAX_FILE})",
                        e.path.as_path(),
                        e.size
                    ));
                }
                Kind::File
                    if e.pack.is_some()
                        && ((e.size > MAX_PACKED && e.offset != Some(0))
                            || e.offset.and_then(|o| o.checked_add(e.size)).is_none()) =>
                {
                    return Err(format!(
                        "file {:?} claims {} bytes in a pack (packs hold files below {MAX_PACKED} after offset 0)",
                        e.path.as_path(),
                        e.size
                    ));
                }
                Kind::Symlink
                    if e.target
                        .as_ref()
                        .is_none_or(|t| t.0.is_empty() || t.0.contains(&0)) =>
                {
                    return Err(format!(
                        "symlink {:?} has no valid target",
                        e.path.as_path()
                    ));
                }
                Kind::Symlink => {
                    links.insert(e.path.as_path().to_owned());
                }
                _ => {}
            }
        }
        for e in &self.entries {
            if e.path
                .as_path()
                .ancestors()
                .skip(1)
                .any(|a| links.contains(a))
            {
                return Err(format!("{:?} lies below a symlink", e.path.as_path()));
            }
        }
        Ok(())
    }

    /// blake3 of the manifest as serialised without its checksum.
    fn digest(&mut self) -> String {
        let kept = self.checksum.take();
        let d = blake3::hash(&serde_json::to_vec(self).expect("serializable"))
            .to_hex()
            .to_string();
        self.checksum = kept;
        d
    }

    /// Set the checksum; the bytes to store.
    pub fn seal(&mut self) -> Vec<u8> {
        self.checksum = None;
        self.checksum = Some(self.digest());
        serde_json::to_vec(self).expect("serializable")
    }

    /// Where an entry's content lives: (pack id, offset) or None for a blob.
    pub fn location(&self, e: &Entry) -> Option<(&str, u64)> {
        Some((self.packs.get(e.pack? as usize)?.as_str(), e.offset?))
    }

    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(entries: Vec<Entry>) -> Manifest {
        Manifest {
            format: FORMAT.into(),
            version: VERSION,
            id: "x".into(),
            created: "t".into(),
            entries,
            skipped: Skipped::default(),
            packs: Vec::new(),
            home: None,
            seq: None,
            checksum: None,
        }
    }

    fn file(p: &[u8]) -> Entry {
        Entry {
            path: RelPath(p.to_vec()),
            kind: Kind::File,
            mode: 0o600,
            mtime_ns: 1,
            size: 1,
            hash: Some("a".repeat(64)),
            target: None,
            pack: None,
            offset: None,
            uid: None,
            gid: None,
        }
    }

    #[test]
    fn non_utf8_paths_round_trip() {
        let mut mm = m(vec![file(b"ok.txt"), file(b"bad\xffname")]);
        // Version 2 had no checksum; version 3 requires one.
        mm.version = 2;
        let text = serde_json::to_vec(&mm).unwrap();
        assert!(String::from_utf8_lossy(&text).contains(r#""path":{"b64":"YmFk/25hbWU="}"#));
        assert_eq!(Manifest::parse("x", &text).unwrap(), mm);
        let mut sealed = mm.clone();
        let bytes = sealed.seal();
        assert_eq!(Manifest::parse("x", &bytes).unwrap(), sealed);
        // One flipped bit that keeps the JSON valid: a mode 0600 -> 0601.
        let text = String::from_utf8(bytes)
            .unwrap()
            .replacen("\"mode\":384", "\"mode\":385", 1);
        assert!(
            Manifest::parse("x", text.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("checksum")
        );
    }

    #[test]
    fn foreign_newer_and_unsafe_manifests_are_refused() {
        assert!(matches!(
            Manifest::parse("a", b"{\"hello\":1}"),
            Err(ManifestError::Foreign(..))
        ));
        assert!(matches!(
            Manifest::parse("a", b"not json"),
            Err(ManifestError::Foreign(..))
        ));
        let newer = br#"{"format":"sbx-backup","version":99}"#;
        assert!(matches!(
            Manifest::parse("a", newer),
            Err(ManifestError::Newer(_, 99))
        ));
        for bad in [&b"../etc/passwd"[..], b"/etc/passwd", b"a/./b", b""] {
            assert!(m(vec![file(bad)]).check().is_err(), "{bad:?}");
        }
        let mut link = file(b"l");
        link.kind = Kind::Symlink;
        link.hash = None;
        link.size = 0;
        link.target = Some(RelPath(b"/etc".to_vec()));
        assert!(
            m(vec![link.clone(), file(b"l/passwd")])
                .check()
                .unwrap_err()
                .contains("below a symlink")
        );
        assert!(m(vec![link, file(b"l2/passwd")]).check().is_ok());
    }
}
