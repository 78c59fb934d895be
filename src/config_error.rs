//! Configuration errors: each names the key and says how to fix it.

/// A configuration problem found at start-up. The relay refuses to start on any of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("config file is not valid TOML: {0}")]
    Syntax(String),
    #[error("[{section}] unknown key `{key}`: {hint}")]
    UnknownKey { section: &'static str, key: String, hint: String },
    #[error("[{section}] missing required key `{key}`: {hint}")]
    Missing { section: &'static str, key: String, hint: String },
    #[error("[{section}] `{key}` = {value:?} is invalid: {reason}")]
    InvalidValue { section: &'static str, key: String, value: String, reason: String },
}
