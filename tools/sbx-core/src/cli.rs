//! Flags every tool shares, flattened into each tool's clap definition so
//! `-q`, `-v`, `--json`, `--color` and `--config` mean the same everywhere.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Default, Args)]
pub struct CommonArgs {
    /// Print nothing but errors; the exit status tells the result.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// More detail on stderr (repeatable; or SBX_LOG=debug).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Output JSON Lines on stdout, one {"type":…,"data":…} object a line.
    #[arg(long, global = true)]
    pub json: bool,

    /// When to color diagnostics: auto, always or never (auto honours NO_COLOR and TERM=dumb).
    #[arg(
        long,
        global = true,
        value_name = "WHEN",
        default_value = "auto",
        hide_possible_values = true
    )]
    pub color: ColorWhen,

    /// Config file instead of $SBX_CONFIG or .agent-sandbox/config.toml found upward from the working directory.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    #[default]
    Auto,
    Always,
    Never,
}
