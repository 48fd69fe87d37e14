//! What is wrong with a config: each problem a value with the key it is
//! about and where that key was written, all of them in one error.

use std::fmt;

/// One thing wrong with the config, flags or environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Problem {
    /// The config file, when the problem is about what it says.
    pub file: Option<String>,
    /// The line (from 1) of the key in the file, when it was found there.
    pub line: Option<usize>,
    /// The dotted key (`policy.max_prune`) or flag (`--link`); empty for a
    /// problem of the file or the whole config.
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    /// `FILE:LINE: key: message`, each part left out when unknown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{file}:{line}: ")?,
            (Some(file), None) => write!(f, "{file}: ")?,
            (None, _) => {}
        }
        match self.key.is_empty() {
            true => write!(f, "{}", self.message),
            false => write!(f, "{}: {}", self.key, self.message),
        }
    }
}

impl Problem {
    /// A problem of a flag or of the config as a whole, not of a line.
    pub fn general(key: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem {
            file: None,
            line: None,
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Every problem found; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    problems: Vec<Problem>,
}

impl ConfigError {
    pub fn new(problems: Vec<Problem>) -> ConfigError {
        debug_assert!(!problems.is_empty());
        ConfigError { problems }
    }

    pub fn one(problem: Problem) -> ConfigError {
        ConfigError::new(vec![problem])
    }

    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }
}

impl fmt::Display for ConfigError {
    /// One problem a line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// The problems of one config file as the checks find them: each is given
/// a dotted key, and gets the file and the key's line here.
pub struct Problems<'a> {
    file: Option<&'a str>,
    text: &'a str,
    found: Vec<Problem>,
}

impl<'a> Problems<'a> {
    /// For the file `file` (none: flags and environment only) read as `text`.
    pub fn new(file: Option<&'a str>, text: &'a str) -> Problems<'a> {
        Problems {
            file,
            text,
            found: Vec::new(),
        }
    }

    /// A problem of `key` of the config file, located by the key's line.
    pub fn at(&mut self, key: impl Into<String>, message: impl Into<String>) {
        let key = key.into();
        self.found.push(Problem {
            file: self.file.map(str::to_string),
            line: super::locate::line_of_key(self.text, &key),
            message: message.into(),
            key,
        });
    }

    /// A problem of flags or of the config as a whole.
    pub fn general(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.found.push(Problem::general(key, message));
    }

    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    pub fn len(&self) -> usize {
        self.found.len()
    }

    /// `Ok(value)` when nothing was found, else every problem: those of
    /// flags and of the whole config first, then by line.
    pub fn finish<T>(mut self, value: T) -> Result<T, ConfigError> {
        self.found.sort_by_key(|p| p.line);
        match self.found.is_empty() {
            true => Ok(value),
            false => Err(ConfigError::new(self.found)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_prints_file_line_key_and_message_leaving_out_what_is_unknown() {
        let mut p = Problem {
            file: Some("tend.yaml".into()),
            line: Some(3),
            key: "policy.max_prune".into(),
            message: "invalid limit".into(),
        };
        assert_eq!(
            p.to_string(),
            "tend.yaml:3: policy.max_prune: invalid limit"
        );
        p.line = None;
        assert_eq!(p.to_string(), "tend.yaml: policy.max_prune: invalid limit");
        p.file = None;
        p.key.clear();
        assert_eq!(p.to_string(), "invalid limit");
        let e = ConfigError::new(vec![p.clone(), Problem::general("--link", "x")]);
        assert_eq!(e.to_string(), "invalid limit\n--link: x");
    }
}
