//! `tend completions SHELL` and `tend man`: shell completion scripts and
//! man pages, generated from the command line's own definition so they
//! cannot drift from it (packaging calls these).

use std::path::Path;
use std::process::ExitCode;

use clap::CommandFactory;

use super::fail;
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
pub fn man(out_dir: Option<&Path>) -> ExitCode {
    let command = Cli::command();
    match out_dir {
        None => {
            let mut page = Vec::new();
            if let Err(e) = clap_mangen::Man::new(command).render(&mut page) {
                return fail(format!("cannot render the man page: {e}"));
            }
            super::out(&String::from_utf8_lossy(&page));
        }
        Some(dir) => {
            if let Err(e) =
                std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(command, dir))
            {
                return fail(format!(
                    "cannot write man pages into {}: {e}",
                    dir.display()
                ));
            }
        }
    }
    ExitCode::SUCCESS
}
