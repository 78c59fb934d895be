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

pub use error::ConfigError;

/// Flattened `dotted.key -> value text` options of one section.
pub type Options = BTreeMap<String, String>;
