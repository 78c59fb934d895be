//! Configuration errors: each names the key and says how to fix it, and none prints a secret.
//!
//! The messages are rendered here from a key path and a value-free reason, never from serde's
//! or toml's own wording: serde's says `invalid type: string "…"` and toml's quotes the source
//! line, and either may be the line holding a password.

use std::fmt;

use super::secret;

/// A configuration problem found at start-up. The relay refuses to start on any of these
/// (exit code 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {reason}")]
    Read { path: String, reason: String },
    /// The file is not TOML. `message` is the parser's, without the source line it quotes.
    #[error("config file is not valid TOML: line {line}, column {column}: {message}")]
    Syntax { line: usize, column: usize, message: String },
    /// A `WALRELAY_*` variable walrelay cannot read (its value is never shown).
    #[error("environment variable {name}: {reason}")]
    Environment { name: String, reason: String },
    #[error("[{section}] unknown key `{key}`: {hint}")]
    UnknownKey { section: &'static str, key: String, hint: String },
    #[error("[{section}] missing required key `{key}`: {hint}")]
    Missing { section: &'static str, key: String, hint: String },
    /// `value` is shown only when `key` is not a secret, and then with any password it
    /// carries masked: see [`secret::shown`].
    #[error("[{section}] `{key}` {}is invalid: {reason}", ShownValue { key, value })]
    InvalidValue { section: &'static str, key: String, value: String, reason: String },
}

/// An [`ConfigError::InvalidValue`]'s value as its message may show it.
struct ShownValue<'a> {
    key: &'a str,
    value: &'a str,
}

impl fmt::Display for ShownValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            return Ok(());
        }
        write!(f, "= {} ", secret::shown(self.key, self.value))
    }
}

impl ConfigError {
    /// The same error with each of `secrets` masked wherever it appears: for messages built
    /// from text in which no key says which value is the secret (a damaged file).
    pub fn scrubbed(self, secrets: &[String]) -> ConfigError {
        let s = |text: String| secret::scrub(&text, secrets);
        match self {
            ConfigError::Read { path, reason } => ConfigError::Read { path, reason: s(reason) },
            ConfigError::Syntax { line, column, message } => {
                ConfigError::Syntax { line, column, message: s(message) }
            }
            ConfigError::Environment { name, reason } => {
                ConfigError::Environment { name: s(name), reason: s(reason) }
            }
            ConfigError::UnknownKey { section, key, hint } => {
                ConfigError::UnknownKey { section, key: s(key), hint: s(hint) }
            }
            ConfigError::Missing { section, key, hint } => {
                ConfigError::Missing { section, key: s(key), hint: s(hint) }
            }
            ConfigError::InvalidValue { section, key, value, reason } => {
                ConfigError::InvalidValue {
                    section,
                    key: s(key),
                    value: s(value),
                    reason: s(reason),
                }
            }
        }
    }
}
