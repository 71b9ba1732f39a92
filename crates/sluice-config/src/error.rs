//! Errors of configuration loading: every one names the file, and the line and column where
//! they are known, as `<path>:<line>:<column>: <reason>`.

use std::{fmt, path::PathBuf};

/// One reason a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file was read but its content is refused.
    #[error("{0}")]
    Invalid(#[from] FileError),
}

/// A refused file content, with its place in the file when known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FileError {
    pub path: PathBuf,
    /// 1-based line and column.
    pub position: Option<(usize, usize)>,
    pub reason: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, column)) => {
                write!(
                    f,
                    "{}:{line}:{column}: {}",
                    self.path.display(),
                    self.reason
                )
            }
            None => write!(f, "{}: {}", self.path.display(), self.reason),
        }
    }
}

/// Everything wrong with one load attempt; the load is refused as a whole.
#[derive(Debug, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}
