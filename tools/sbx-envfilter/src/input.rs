//! Reading an environment from stdin: `NAME=VALUE` lines, or NUL-separated
//! records as `env -0` prints them. Bytes are kept as they are (no UTF-8
//! requirement); malformed records are refused with their number, never
//! their value.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum InputError {
    #[error("stdin record {0} has no '=' (expected NAME=VALUE)")]
    NoEquals(usize),
    #[error("stdin record {0} has an empty name")]
    EmptyName(usize),
    #[error("stdin line {0} contains a NUL byte; use -0 for NUL-separated input")]
    NulInLine(usize),
}

/// An environment in order, names unique: a later definition replaces an
/// earlier one in place, as `env A=1 A=2` and shells do.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Env {
    vars: Vec<(OsString, OsString)>,
    index: HashMap<OsString, usize>,
}

impl Env {
    pub fn push(&mut self, name: OsString, value: OsString) {
        match self.index.get(&name) {
            Some(&i) => self.vars[i].1 = value,
            None => {
                self.index.insert(name.clone(), self.vars.len());
                self.vars.push((name, value));
            }
        }
    }

    pub fn vars(&self) -> &[(OsString, OsString)] {
        &self.vars
    }

    pub fn into_vars(self) -> Vec<(OsString, OsString)> {
        self.vars
    }
}

impl FromIterator<(OsString, OsString)> for Env {
    fn from_iter<I: IntoIterator<Item = (OsString, OsString)>>(it: I) -> Self {
        let mut e = Env::default();
        for (k, v) in it {
            e.push(k, v);
        }
        e
    }
}

/// Parse records. With `nul`, records end in NUL and may hold newlines;
/// otherwise they end in '\n', blank lines are skipped, and a NUL is an error.
pub fn parse(data: &[u8], nul: bool) -> Result<Env, InputError> {
    let sep = if nul { 0 } else { b'\n' };
    let mut env = Env::default();
    let mut records = data.split(|&b| b == sep).peekable();
    let mut n = 0;
    while let Some(rec) = records.next() {
        // The terminator after the last record leaves one empty piece.
        if rec.is_empty() && (records.peek().is_none() || !nul) {
            if !nul {
                n += 1;
            }
            continue;
        }
        n += 1;
        if !nul && rec.contains(&0) {
            return Err(InputError::NulInLine(n));
        }
        let eq = memchr::memchr(b'=', rec).ok_or(InputError::NoEquals(n))?;
        if eq == 0 {
            return Err(InputError::EmptyName(n));
        }
        env.push(
            OsString::from_vec(rec[..eq].to_vec()),
            OsString::from_vec(rec[eq + 1..].to_vec()),
        );
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(e: &Env) -> Vec<String> {
        e.vars()
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn lines_and_nul_records() {
        let e = parse(b"A=1\nB=x=y\n\nC=\n", false).unwrap();
        assert_eq!(names(&e), ["A", "B", "C"]);
        assert_eq!(e.vars()[1].1, "x=y");
        assert_eq!(e.vars()[2].1, "");

        let e = parse(b"A=multi\nline\0B=2\0", true).unwrap();
        assert_eq!(e.vars()[0].1, "multi\nline");
        assert_eq!(names(&e), ["A", "B"]);
        // No trailing NUL is fine too.
        assert_eq!(names(&parse(b"A=1\0B=2", true).unwrap()), ["A", "B"]);
    }

    #[test]
    fn later_definition_wins_in_place() {
        let e = parse(b"A=1\nB=2\nA=3\n", false).unwrap();
        assert_eq!(names(&e), ["A", "B"]);
        assert_eq!(e.vars()[0].1, "3");
    }

    #[test]
    fn bad_records_are_refused_by_number() {
        assert_eq!(
            parse(b"A=1\nnovalue\n", false),
            Err(InputError::NoEquals(2))
        );
        assert_eq!(parse(b"A=1\n\n=x\n", false), Err(InputError::EmptyName(3)));
        assert_eq!(
            parse(b"A=1\nB=a\0b\n", false),
            Err(InputError::NulInLine(2))
        );
        assert_eq!(parse(b"A=1\0\0B=2\0", true), Err(InputError::NoEquals(2)));
        assert_eq!(parse(b"=1\0", true), Err(InputError::EmptyName(1)));
    }

    #[test]
    fn invalid_utf8_is_kept_byte_for_byte() {
        let e = parse(b"N\xff=v\xfe\n", false).unwrap();
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(e.vars()[0].0.as_bytes(), b"N\xff");
        assert_eq!(e.vars()[0].1.as_bytes(), b"v\xfe");
    }
}
