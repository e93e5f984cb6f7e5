//! sbx-prefetch: `sbx-run build-base --prefetch` in a binary that compiles
//! in a fraction of sbx-run's time. scripts/shell starts it first, so the
//! base image's slow layers (mmdebstrap, Debian packages, AI CLIs), which
//! wait on the network, are fetched while the tools compile. Not installed.
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use sbx_core::Exit;
use sbx_core::cli::CommonArgs;
use sbx_core::output;
use sbx_image::base::{BaseOpts, build_base};

#[derive(Debug, Parser)]
#[command(
    name = "sbx-prefetch",
    version,
    about = "Cache the base image's package and AI-CLI layers (sbx-run build-base --prefetch)",
    long_about = "Cache the base image's package and AI-CLI layers, as `sbx-run build-base --prefetch` does, \
        before the sbx tools are built; the next `sbx-run build-base` with the same options reuses them. \
        It takes build-base's options. scripts/shell runs it while the tools compile."
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    base: BaseOpts,
}

fn main() -> ExitCode {
    // --prefetch is what this binary always does.
    let cmd = Cli::command().mut_arg("prefetch", |a| a.hide(true));
    sbx_core::main(cmd, Exit::Software, |cli: Cli| {
        output::init("sbx-prefetch", &cli.common);
        sbx_image::watch_interrupts();
        let o = BaseOpts {
            prefetch: true,
            ..cli.base
        };
        build_base(&cli.common, &o)?;
        Ok(Exit::Ok)
    })
}
