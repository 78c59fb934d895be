//! What a user wrote, before any module reads it: the `dotted.key -> value` maps of the
//! pass-through sections, the error that names a bad key and its fix, and what counts as a
//! secret in either.
//!
//! A leaf: [`crate::config`] reads the file into these, and the modules that own a section's
//! meaning (the router, the envelope, the message selection) check their own options with them,
//! so none of those needs to import `config`, which calls them.

use std::collections::BTreeMap;

mod error;
pub mod secret;
pub(crate) mod section;

pub use error::ConfigError;

/// Flattened `dotted.key -> value text` options of one section.
pub type Options = BTreeMap<String, String>;

/// A value its section refuses, with why (never the value of a secret key: callers pass the
/// text they may show).
pub(crate) fn invalid(section: &'static str, key: &str, value: &str, reason: &str) -> ConfigError {
    ConfigError::InvalidValue {
        section,
        key: key.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// A key the section cannot do without; `hint` says what to set.
pub(crate) fn required<T>(
    section: &'static str,
    value: Option<T>,
    key: &str,
    hint: &str,
) -> Result<T, ConfigError> {
    value.ok_or_else(|| ConfigError::Missing {
        section,
        key: key.to_string(),
        hint: hint.to_string(),
    })
}
