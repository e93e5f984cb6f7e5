//! The one exit-code table for every sbx tool (sysexits.h plus the wrapper
//! codes of env(1) and docker run), so scripts can branch on causes.

use std::process::ExitCode;

/// Exit statuses shared by all tools (the table is in the README).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Exit {
    Ok = 0,
    /// A query's "no", like grep's 1.
    No = 1,
    Usage = 64,
    DataErr = 65,
    NoInput = 66,
    Unavailable = 69,
    Software = 70,
    OsErr = 71,
    IoErr = 74,
    TempFail = 75,
    /// Denied by sbx policy; the decision is in the audit log.
    Denied = 77,
    Config = 78,
    /// A wrapper's own failure before the child ran.
    WrapperFailed = 125,
    /// The child exists but cannot be executed.
    CannotInvoke = 126,
    /// The child was not found.
    NotFound = 127,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_table() {
        let table = [
            (Exit::Ok, 0),
            (Exit::No, 1),
            (Exit::Usage, 64),
            (Exit::DataErr, 65),
            (Exit::NoInput, 66),
            (Exit::Unavailable, 69),
            (Exit::Software, 70),
            (Exit::OsErr, 71),
            (Exit::IoErr, 74),
            (Exit::TempFail, 75),
            (Exit::Denied, 77),
            (Exit::Config, 78),
            (Exit::WrapperFailed, 125),
            (Exit::CannotInvoke, 126),
            (Exit::NotFound, 127),
        ];
        for (e, c) in table {
            assert_eq!(e.code(), c, "{e:?}");
        }
    }
}
