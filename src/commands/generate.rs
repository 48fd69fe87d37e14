//! `tend completions SHELL` and `tend man`: shell completion scripts and
//! man pages, generated from the command line's own definition so they
//! cannot drift from it (packaging calls these).

use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory;

use super::{Because, Cause, Failure};
use crate::cli::{Cli, Shell};

pub fn completions(shell: Shell) -> ExitCode {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "tend", &mut script);
    super::out(&String::from_utf8_lossy(&script));
    ExitCode::SUCCESS
}

/// Prints tend(1), or writes tend.1 and one page per subcommand
/// (tend-diff.1, tend-plugin-check.1, ...) into `out_dir`.
pub fn man(out_dir: Option<&Path>) -> Result<ExitCode, Failure> {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    let result = match out_dir {
        None => page(command).map(|p| super::out(&p)),
        Some(dir) => std::fs::create_dir_all(dir).and_then(|()| write_pages(command, dir)),
    };
    result
        .because(Cause::Io)
        .map_err(|f| f.context("cannot write the man pages"))?;
    Ok(ExitCode::SUCCESS)
}

/// Each command's page, subcommands first, named as `man` looks them up.
fn write_pages(command: clap::Command, dir: &Path) -> std::io::Result<()> {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir)?;
    }
    let name = clap_mangen::Man::new(command.clone()).get_filename();
    std::fs::write(dir.join(name), page(command)?)
}

/// One page in roff, opening with its `.TH` title line (the string
/// definitions roff puts first follow it; nothing before the title uses
/// them).
fn page(command: clap::Command) -> std::io::Result<String> {
    let mut roff = Vec::new();
    clap_mangen::Man::new(command).render(&mut roff)?;
    let text = String::from_utf8_lossy(&roff).into_owned();
    let Some(at) = text.find(".TH ") else {
        return Ok(text);
    };
    let (before, rest) = text.split_at(at);
    let (title, body) = rest.split_once('\n').unwrap_or((rest, ""));
    Ok(format!("{title}\n{before}{body}"))
}
