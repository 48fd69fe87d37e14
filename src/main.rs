//! The `tend` binary: parse the command line, run the command, exit.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    tend::commands::run(tend::cli::Cli::parse())
}
