//! `sbx_core::main`: parse, run, and turn the outcome into one stderr line
//! and one exit code, the same way for every tool.

use std::any::Any;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::process::ExitCode;

use clap::{Command, FromArgMatches};

use crate::error::BoxError;
use crate::{Exit, output};

/// Run a tool. `panic_exit` is the status for a bug: most tools use
/// `Exit::Software`; a guard that must fail closed uses `Exit::Denied`.
/// `run` returns an [`Exit`], or a raw `ExitCode` for a wrapper that passes
/// its child's status through.
pub fn main<A: FromArgMatches, R: Into<ExitCode>>(
    command: Command,
    panic_exit: Exit,
    run: impl FnOnce(A) -> Result<R, BoxError>,
) -> ExitCode {
    let name: &'static str = Box::leak(command.get_name().to_owned().into_boxed_str());
    let matches = match command.try_get_matches_from(std::env::args_os()) {
        Ok(m) => m,
        Err(e) => return clap_exit(e),
    };
    let args = match A::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => return clap_exit(e),
    };
    match panic::catch_unwind(AssertUnwindSafe(|| run(args))) {
        Ok(Ok(code)) => code.into(),
        Ok(Err(e)) => report(name, e.as_ref()),
        Err(p) => {
            eprintln!("{name}: internal error: {}", panic_text(&p));
            panic_exit.into()
        }
    }
}

/// clap's help and version go to stdout with 0; its usage errors exit 64
/// rather than clap's own 2, to keep one table.
fn clap_exit(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind::*;
    let _ = e.print();
    match e.kind() {
        DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand => Exit::Ok.into(),
        _ => Exit::Usage.into(),
    }
}

fn report(name: &'static str, e: &(dyn crate::SbxError + 'static)) -> ExitCode {
    // A closed pipe (`sbx-envfilter --print | head -1`) is not a failure.
    if is_broken_pipe(e) {
        return Exit::Ok.into();
    }
    output::set_tool_if_unset(name);
    output::error(&chain(e));
    e.exit().into()
}

/// "outer: cause: root cause", skipping causes already in the message.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !msg.contains(&t) {
            msg.push_str(": ");
            msg.push_str(&t);
        }
        src = s.source();
    }
    msg
}

fn is_broken_pipe<'a>(e: &'a (dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&'a (dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::BrokenPipe {
                return true;
            }
        }
        cur = c.source();
    }
    false
}

fn panic_text(p: &Box<dyn Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_owned()
    }
}
