//! Which logical decoding messages (`pg_logical_emit_message`) become outbox events: Debezium's
//! `message.prefix.include.list` / `message.prefix.exclude.list`, and what walrelay does with a
//! non-transactional message. Pure: the assembler asks [`MessageSelection::verdict`] once per
//! message.
//!
//! Prefix lists follow Debezium 3.6.3 (`Strings.RegExSplitter`, `Predicates.includes`): a
//! comma-separated list of regular expressions (`\,` is a literal comma), each entry trimmed and
//! empty entries skipped, compiled case-insensitively, and a prefix must match an entry as a
//! whole. Unlike Debezium, which captures every prefix when neither list is set, walrelay then
//! ignores logical messages altogether: a relay that never asked for messages should not start
//! routing an unrelated extension's `pg_logical_emit_message` calls.
//!
//! A transactional message is decoded at its transaction's commit, in commit order with the
//! transaction's rows, and never when the transaction rolls back. A non-transactional one is
//! sent as soon as PostgreSQL decodes it, **even if its transaction later rolls back**, so it is
//! not an outbox event unless `[outbox] non_transactional_messages = "relay"` says the
//! application accepts that.

use regex::{Regex, RegexBuilder};

use crate::options::ConfigError;
use crate::options::Options;

pub const INCLUDE_KEY: &str = "message.prefix.include.list";
pub const EXCLUDE_KEY: &str = "message.prefix.exclude.list";
/// `[outbox]`: what to do with a non-transactional message of a selected prefix.
pub const NON_TRANSACTIONAL_KEY: &str = "non_transactional_messages";

/// Which messages become events, and how non-transactional ones are treated.
#[derive(Debug, Clone)]
pub struct MessageSelection {
    prefixes: Prefixes,
    non_transactional: NonTransactional,
}

#[derive(Debug, Clone)]
enum Prefixes {
    Include(Vec<Pattern>),
    Exclude(Vec<Pattern>),
}

#[derive(Debug, Clone)]
struct Pattern {
    /// The entry as written (trimmed, `\,` unescaped).
    text: String,
    /// `\A(?:text)\z`, case-insensitive.
    regex: Regex,
}

/// `[outbox] non_transactional_messages`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonTransactional {
    /// Refused: logged with its LSN and prefix, counted, dead-lettered when `[dead_letter]` is
    /// configured (the default).
    Refuse,
    /// Relayed as Debezium relays it, at its WAL position, even when its transaction rolls back.
    Relay,
}

/// What becomes of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Its prefix is not selected: skipped, as Debezium skips it.
    Filtered,
    /// An outbox event.
    Event,
    /// A non-transactional message of a selected prefix, refused.
    Refused,
}

impl MessageSelection {
    /// The selection from `[debezium]`'s prefix lists and `[outbox] non_transactional_messages`
    /// (`non_transactional`), or `None` when neither list is set (messages are then ignored).
    pub fn parse(
        debezium: &Options,
        non_transactional: Option<&str>,
    ) -> Result<Option<MessageSelection>, ConfigError> {
        let listed = |key: &str| debezium.get(key).filter(|v| !v.trim().is_empty());
        let prefixes = match (listed(INCLUDE_KEY), listed(EXCLUDE_KEY)) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::InvalidValue {
                    section: "debezium",
                    key: format!("{INCLUDE_KEY}/{EXCLUDE_KEY}"),
                    value: String::new(),
                    reason: format!(
                        "set {INCLUDE_KEY} or {EXCLUDE_KEY}, not both (Debezium refuses both too)"
                    ),
                })
            }
            (Some(list), None) => Prefixes::Include(patterns(INCLUDE_KEY, list)?),
            (None, Some(list)) => Prefixes::Exclude(patterns(EXCLUDE_KEY, list)?),
            (None, None) => {
                return match non_transactional {
                    None => Ok(None),
                    Some(v) => Err(ConfigError::InvalidValue {
                        section: "outbox",
                        key: NON_TRANSACTIONAL_KEY.into(),
                        value: v.into(),
                        reason: format!(
                            "no logical messages are relayed: set [debezium] {INCLUDE_KEY} (or \
                             {EXCLUDE_KEY}) to relay messages, or remove this key"
                        ),
                    }),
                }
            }
        };
        let non_transactional = match non_transactional.map(str::trim) {
            None | Some("refuse") => NonTransactional::Refuse,
            Some("relay") => NonTransactional::Relay,
            Some(other) => {
                return Err(ConfigError::InvalidValue {
                    section: "outbox",
                    key: NON_TRANSACTIONAL_KEY.into(),
                    value: other.into(),
                    reason: "expected \"refuse\" (the default) or \"relay\"".into(),
                })
            }
        };
        Ok(Some(MessageSelection { prefixes, non_transactional }))
    }

    /// Whether a message with this prefix is an outbox event (before its transactionality).
    pub fn selects(&self, prefix: &str) -> bool {
        match &self.prefixes {
            Prefixes::Include(list) => list.iter().any(|p| p.regex.is_match(prefix)),
            Prefixes::Exclude(list) => !list.iter().any(|p| p.regex.is_match(prefix)),
        }
    }

    pub fn verdict(&self, transactional: bool, prefix: &str) -> Verdict {
        if !self.selects(prefix) {
            Verdict::Filtered
        } else if transactional || self.non_transactional == NonTransactional::Relay {
            Verdict::Event
        } else {
            Verdict::Refused
        }
    }

    pub fn non_transactional(&self) -> NonTransactional {
        self.non_transactional
    }

    /// One line for logs and `walrelay check`.
    pub fn describe(&self) -> String {
        let (which, list) = match &self.prefixes {
            Prefixes::Include(list) => ("prefixes matching", list),
            Prefixes::Exclude(list) => ("every prefix except those matching", list),
        };
        let entries: Vec<String> = list.iter().map(|p| format!("`{}`", p.text)).collect();
        let non_tx = match self.non_transactional {
            NonTransactional::Refuse => "non-transactional ones refused",
            NonTransactional::Relay => "non-transactional ones relayed too",
        };
        format!(
            "{which} {} (case-insensitive, whole prefix); transactional messages relayed, {non_tx}",
            entries.join(", ")
        )
    }
}

/// Debezium's `RegExSplitter`: split at commas a backslash does not escape, skip empty parts,
/// trim the rest and unescape `\,`; then each entry is compiled case-insensitively and must
/// match a whole prefix.
fn patterns(key: &str, list: &str) -> Result<Vec<Pattern>, ConfigError> {
    let invalid = |reason: String| ConfigError::InvalidValue {
        section: "debezium",
        key: key.to_owned(),
        value: list.to_owned(),
        reason,
    };
    let mut parts = Vec::new();
    let mut start = 0;
    let mut chars = list.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if chars.next().is_none() => {
                return Err(invalid(
                    "ends with a lone `\\`; escape a comma as `\\,`, a backslash as `\\\\`".into(),
                ));
            }
            ',' => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    let mut out = Vec::new();
    for part in parts.into_iter().filter(|p| !p.is_empty()) {
        let text = part.trim().replace("\\,", ",");
        let regex = RegexBuilder::new(&format!(r"\A(?:{text})\z"))
            .case_insensitive(true)
            .build()
            .map_err(|e| {
            invalid(format!(
                "entry `{text}` is not a regular expression walrelay can compile (Rust's \
                     regex syntax: Java's for groups, classes and quantifiers, without \
                     look-around or backreferences): {e}"
            ))
        })?;
        out.push(Pattern { text, regex });
    }
    if out.is_empty() {
        return Err(invalid("lists no prefix; name at least one, or remove the key".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(pairs: &[(&str, &str)], non_tx: Option<&str>) -> MessageSelection {
        let opts: Options = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        MessageSelection::parse(&opts, non_tx).unwrap().expect("a list is set")
    }

    #[test]
    fn include_list_matches_whole_prefixes_case_insensitively() {
        // The golden run with include list `outbox` (messages_defaults): OUTBOX is relayed,
        // outboxes, outbox.v2 and audit are not.
        let s = selection(&[(INCLUDE_KEY, "outbox")], None);
        assert!(s.selects("outbox") && s.selects("OUTBOX") && s.selects("Outbox"));
        for other in ["outboxes", "outbox.v2", "audit", "my.outbox", ""] {
            assert!(!s.selects(other), "{other}");
        }
    }

    #[test]
    fn list_entries_are_trimmed_regexes_and_a_backslash_escapes_a_comma() {
        // messages_prefix_include_regex_list: ` outbox , outbox\.v[0-9]+ ` (spaces included).
        let s = selection(&[(INCLUDE_KEY, r" outbox , outbox\.v[0-9]+ ")], None);
        assert!(s.selects("outbox") && s.selects("outbox.v2") && s.selects("OUTBOX.V10"));
        assert!(!s.selects("outboxes") && !s.selects("outbox.v") && !s.selects("outboxXv2"));
        let s = selection(&[(INCLUDE_KEY, r"a\,b,,c")], None);
        assert!(s.selects("a,b") && s.selects("c") && !s.selects("a"), "{}", s.describe());
    }

    #[test]
    fn exclude_list_selects_every_other_prefix() {
        // messages_prefix_exclude_list: `audit`; outboxes and outbox.v2 are relayed too.
        let s = selection(&[(EXCLUDE_KEY, "audit")], None);
        assert!(s.selects("outbox") && s.selects("outboxes") && s.selects("outbox.v2"));
        assert!(!s.selects("audit") && !s.selects("AUDIT"));
    }

    #[test]
    fn non_transactional_messages_are_refused_unless_relaying_them_is_configured() {
        let s = selection(&[(INCLUDE_KEY, "outbox")], None);
        assert_eq!(s.verdict(true, "outbox"), Verdict::Event);
        assert_eq!(s.verdict(false, "outbox"), Verdict::Refused);
        assert_eq!(s.verdict(false, "audit"), Verdict::Filtered, "filtered before refused");
        let s = selection(&[(INCLUDE_KEY, "outbox")], Some("relay"));
        assert_eq!(s.verdict(false, "outbox"), Verdict::Event);
        assert_eq!(s.non_transactional(), NonTransactional::Relay);
    }

    #[test]
    fn no_list_means_no_messages_and_misconfigurations_name_the_keys() {
        let none: Options = Options::new();
        assert!(MessageSelection::parse(&none, None).unwrap().is_none());
        let both: Options = [(INCLUDE_KEY, "a"), (EXCLUDE_KEY, "b")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let e = MessageSelection::parse(&both, None).unwrap_err().to_string();
        assert!(e.contains(INCLUDE_KEY) && e.contains(EXCLUDE_KEY), "{e}");
        let e = MessageSelection::parse(&none, Some("relay")).unwrap_err().to_string();
        assert!(e.contains(NON_TRANSACTIONAL_KEY) && e.contains(INCLUDE_KEY), "{e}");
        let one: Options = [(INCLUDE_KEY.to_string(), "outbox".to_string())].into();
        let e = MessageSelection::parse(&one, Some("maybe")).unwrap_err().to_string();
        assert!(e.contains("relay"), "{e}");
        let bad: Options = [(INCLUDE_KEY.to_string(), "(?<=x)y".to_string())].into();
        let e = MessageSelection::parse(&bad, None).unwrap_err().to_string();
        assert!(e.contains("look-around"), "{e}");
        let commas: Options = [(INCLUDE_KEY.to_string(), ", ,".to_string())].into();
        // `" "` is a non-empty part, trimmed to the empty pattern, as in Debezium.
        let s = MessageSelection::parse(&commas, None).unwrap().unwrap();
        assert!(s.selects("") && !s.selects("outbox"));
    }
}
