//! A failure of a differential run's harness itself (not a difference between the servers),
//! shared by the runs against envoyproxy/ratelimit and against Limitador.

use std::fmt;

/// A failure of the harness itself (not a difference between the servers).
#[derive(Debug)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error(e.to_string())
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error(format!("redis: {e}"))
    }
}
