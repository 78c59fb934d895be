//! Configuration errors: each names the key and says how to fix it, and none prints a secret.
//!
//! The messages are rendered here from a key path and a value-free reason, never from serde's
//! or toml's own wording: serde's says `invalid type: string "…"` and toml's quotes the source
//! line, and either may be the line holding a password.

use std::fmt;

use super::secret;

/// A configuration problem found at start-up. The relay refuses to start on any of these
/// (exit code 2). `Debug` shows an invalid value as `Display` does (see [`secret::shown`]).
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
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

impl fmt::Debug for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, reason } => {
                f.debug_struct("Read").field("path", path).field("reason", reason).finish()
            }
            ConfigError::Syntax { line, column, message } => f
                .debug_struct("Syntax")
                .field("line", line)
                .field("column", column)
                .field("message", message)
                .finish(),
            ConfigError::Environment { name, reason } => {
                f.debug_struct("Environment").field("name", name).field("reason", reason).finish()
            }
            ConfigError::UnknownKey { section, key, hint } => f
                .debug_struct("UnknownKey")
                .field("section", section)
                .field("key", key)
                .field("hint", hint)
                .finish(),
            ConfigError::Missing { section, key, hint } => f
                .debug_struct("Missing")
                .field("section", section)
                .field("key", key)
                .field("hint", hint)
                .finish(),
            ConfigError::InvalidValue { section, key, value, reason } => f
                .debug_struct("InvalidValue")
                .field("section", section)
                .field("key", key)
                .field("value", &format_args!("{}", secret::shown(key, value)))
                .field("reason", reason)
                .finish(),
        }
    }
}

impl ConfigError {
    /// The same error with each of `secrets` masked wherever it appears: for messages built
    /// from text in which no key says which value is the secret (a damaged file).
    /// The `WALRELAY_*` variable the error is about, when a variable and not the file set
    /// what is wrong (see `env::attribute`).
    pub fn variable(&self) -> Option<String> {
        let set_by = |text: &str| {
            let (_, rest) = text.rsplit_once("(set by ")?;
            rest.strip_suffix(')').map(str::to_string)
        };
        match self {
            ConfigError::Environment { name, .. } => Some(name.clone()),
            ConfigError::UnknownKey { hint: text, .. }
            | ConfigError::InvalidValue { reason: text, .. } => set_by(text),
            _ => None,
        }
    }

    /// Where to look: "in the environment variable …" or "in <file>", for the one line that
    /// reports a configuration error.
    pub fn origin(&self, path: &std::path::Path) -> String {
        match self.variable() {
            Some(variable) => {
                format!("in environment variable {variable} (overriding {})", path.display())
            }
            None => format!("in {}", path.display()),
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_error_shows_a_secret_keys_value_by_type_in_display_and_debug() {
        let e = ConfigError::InvalidValue {
            section: "kafka",
            key: "sasl.password".into(),
            value: "hunter2".into(),
            reason: "is not accepted".into(),
        };
        assert_eq!(
            e.to_string(),
            "[kafka] `sasl.password` = (a string, not shown) is invalid: is not accepted"
        );
        assert!(!format!("{e:?}").contains("hunter2"), "{e:?}");
        let url = ConfigError::InvalidValue {
            section: "source",
            key: "url".into(),
            value: "postgres://u:hunter2@h/d".into(),
            reason: "r".into(),
        };
        assert!(!format!("{url} {url:?}").contains("hunter2"), "{url:?}");
    }
}
