//! The environment overlay: `WALRELAY_<SECTION>_<KEY>` variables override file keys, so that
//! secrets can come from a Kubernetes Secret or a CI variable instead of the file.
//!
//! Variables are read as `OsString`s: `std::env::vars()` panics on the first variable that is not
//! UTF-8, anywhere in the environment. A non-UTF-8 variable outside `WALRELAY_*` is none of
//! walrelay's business; one inside is an error naming it (its value is never shown).

use std::ffi::OsString;

use super::{section_names, ConfigError};

/// Environment variables that override file keys start with this.
pub const ENV_PREFIX: &str = "WALRELAY_";

/// One override: `[section] key = value`, and the variable it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Override {
    pub section: &'static str,
    pub key: String,
    pub value: String,
    pub variable: String,
}

/// `error` with the variable named when the key it is about came from the environment: the
/// file does not hold that key, so "fix the key" alone would send the operator to the wrong place.
pub(super) fn attribute(
    error: ConfigError,
    overrides: &[(&'static str, String, String)],
) -> ConfigError {
    let from = |section: &str, key: &str| {
        overrides.iter().find(|(s, k, _)| *s == section && k == key).map(|(_, _, v)| v.clone())
    };
    match error {
        ConfigError::UnknownKey { section, key, hint } => match from(section, &key) {
            Some(variable) => ConfigError::UnknownKey {
                section,
                key,
                hint: format!("{hint} (set by {variable})"),
            },
            None => ConfigError::UnknownKey { section, key, hint },
        },
        ConfigError::InvalidValue { section, key, value, reason } => match from(section, &key) {
            Some(variable) => ConfigError::InvalidValue {
                section,
                key,
                value,
                reason: format!("{reason} (set by {variable})"),
            },
            None => ConfigError::InvalidValue { section, key, value, reason },
        },
        other => other,
    }
}

/// The overrides among `vars`, in order. Variables whose next word after the prefix is not a
/// section are left alone (`WALRELAY_BIN`, `WALRELAY_TEST_NOTES`).
pub(super) fn overrides<K, V>(
    vars: impl IntoIterator<Item = (K, V)>,
) -> Result<Vec<Override>, ConfigError>
where
    K: Into<OsString>,
    V: Into<OsString>,
{
    let mut out = Vec::new();
    for (name, value) in vars {
        let (name, value) = (name.into(), value.into());
        let Some(name) = name.to_str() else {
            if name.as_encoded_bytes().starts_with(ENV_PREFIX.as_bytes()) {
                return Err(ConfigError::Environment {
                    name: name.to_string_lossy().into_owned(),
                    reason: "the variable's name is not UTF-8; rename it".into(),
                });
            }
            continue;
        };
        let Some((section, key)) = env_key(name) else { continue };
        let Some(value) = value.to_str() else {
            return Err(ConfigError::Environment {
                name: name.to_string(),
                reason: format!(
                    "its value is not UTF-8 (it would set [{section}] `{key}`); set it to UTF-8 text"
                ),
            });
        };
        out.push(Override { section, key, value: value.to_string(), variable: name.to_string() });
    }
    Ok(out)
}

/// `WALRELAY_DEAD_LETTER_TOPIC` → (`dead_letter`, `topic`); `WALRELAY_KAFKA_LINGER__MS` →
/// (`kafka`, `linger.ms`). Longest section name first, so `DEAD_LETTER` wins over a shorter one.
pub(super) fn env_key(name: &str) -> Option<(&'static str, String)> {
    let rest = name.strip_prefix(ENV_PREFIX)?;
    let mut sections: Vec<&'static str> = section_names().collect();
    sections.sort_by_key(|s| std::cmp::Reverse(s.len()));
    sections.into_iter().find_map(|section| {
        let key = rest.strip_prefix(&section.to_ascii_uppercase())?.strip_prefix('_')?;
        (!key.is_empty()).then(|| (section, key.to_ascii_lowercase().replace("__", ".")))
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt;

    use super::*;

    #[test]
    fn env_names_map_to_section_and_dotted_key() {
        assert_eq!(env_key("WALRELAY_DEAD_LETTER_TOPIC"), Some(("dead_letter", "topic".into())));
        assert_eq!(
            env_key("WALRELAY_KAFKA_SASL__PASSWORD"),
            Some(("kafka", "sasl.password".into()))
        );
        assert_eq!(env_key("WALRELAY_BIN"), None);
        assert_eq!(env_key("WALRELAY_SOURCE_"), None);
    }

    #[test]
    fn env_non_utf8_variables_are_skipped_outside_the_prefix_and_named_inside_it() {
        let bad = OsString::from_vec(vec![b'x', 0xff, b'y']);
        let vars = vec![
            (OsString::from_vec(b"LANG\xff".to_vec()), bad.clone()),
            (OsString::from("OTHER"), bad.clone()),
            (OsString::from("WALRELAY_KAFKA_LINGER__MS"), OsString::from("5")),
        ];
        let found = overrides(vars).unwrap();
        assert_eq!(
            found,
            [Override {
                section: "kafka",
                key: "linger.ms".into(),
                value: "5".into(),
                variable: "WALRELAY_KAFKA_LINGER__MS".into()
            }]
        );
        let e = overrides([(OsString::from("WALRELAY_KAFKA_SASL__PASSWORD"), bad.clone())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("WALRELAY_KAFKA_SASL__PASSWORD") && e.contains("not UTF-8"), "{e}");
        let e = overrides([(OsString::from_vec(b"WALRELAY_\xff".to_vec()), OsString::from("v"))])
            .unwrap_err()
            .to_string();
        assert!(e.contains("name is not UTF-8"), "{e}");
    }
}
