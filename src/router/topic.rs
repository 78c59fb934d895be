//! Topic routing: Kafka Connect's `RegexRouter` with Java regex/replacement semantics, and
//! Kafka's topic-name rules.
//!
//! `RegexRouter.apply`: if `Pattern.matcher(topic).matches()` (the whole value matches), the
//! topic becomes `matcher.replaceFirst(replacement)`; otherwise the raw value is the topic.
//! `replaceFirst` re-runs the search from the start (`find`), so the replacement replaces the
//! *first* match, which can be shorter than the whole value (lazy quantifiers, alternations); the
//! rest of the value is appended unchanged. Both steps are reproduced here.
//!
//! Patterns are compiled by the `regex` crate, whose syntax is Java's for everything a topic
//! route needs (groups, `(?<name>…)`, classes, quantifiers); look-around and backreferences do
//! not exist there and are reported as configuration errors.

use regex::Regex;

/// Kafka's longest legal topic name.
pub(crate) const MAX_TOPIC_LEN: usize = 249;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Group(usize),
    Named(String),
    /// `${schema}` and `${table}` where the regex has no group of that name: the schema and the
    /// name of the row's table (walrelay's, for one outbox per tenant; empty for a logical
    /// message, which has no table).
    Schema,
    Table,
}

/// A compiled `route.topic.regex` + `route.topic.replacement`.
#[derive(Debug, Clone)]
pub(crate) struct TopicRouter {
    full: Regex,
    find: Regex,
    parts: Vec<Part>,
    /// `parts` name the row's table (`${schema}`, `${table}`): the topic depends on it, not
    /// only on the route value. Read for every row, so decided once here.
    per_table: bool,
}

impl TopicRouter {
    /// Compiles the pair. Errors carry the offending key and a reason naming the fix.
    pub(crate) fn new(
        regex: &str,
        replacement: &str,
    ) -> Result<TopicRouter, (&'static str, String)> {
        let hint = "walrelay compiles it with Rust's regex syntax, which matches Java's for \
                    groups, classes and quantifiers but has no look-around or backreferences";
        let find = Regex::new(regex).map_err(|e| {
            ("route.topic.regex", format!("not a valid regular expression ({hint}): {e}"))
        })?;
        let full = Regex::new(&format!(r"\A(?:{regex})\z")).map_err(|e| {
            ("route.topic.regex", format!("not a valid regular expression ({hint}): {e}"))
        })?;
        let parts =
            parse_replacement(replacement, &find).map_err(|e| ("route.topic.replacement", e))?;
        let per_table = parts.iter().any(|p| matches!(p, Part::Schema | Part::Table));
        Ok(TopicRouter { full, find, parts, per_table })
    }

    /// The one topic every matching value goes to, when the replacement refers to no group
    /// (`route.topic.replacement = "events"`): a topic `walrelay check` can look for.
    pub(crate) fn fixed_topic(&self) -> Option<String> {
        let mut topic = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(s) => topic.push_str(s),
                Part::Group(_) | Part::Named(_) | Part::Schema | Part::Table => return None,
            }
        }
        Some(topic)
    }

    /// Whether the topic depends on the row's table (`${schema}`, `${table}`), not only on the
    /// route value.
    pub(crate) fn per_table(&self) -> bool {
        self.per_table
    }

    /// The topic for a `route.by.field` value of a row of `table` (schema, name; empty for a
    /// message), not yet validated as a Kafka topic name.
    pub(crate) fn apply(&self, value: &str, table: (&str, &str)) -> String {
        if !self.full.is_match(value) {
            return value.to_owned();
        }
        let Some(caps) = self.find.captures(value) else { return value.to_owned() };
        let m = caps.get(0).expect("group 0 always participates");
        let mut out = String::with_capacity(value.len() + 16);
        out.push_str(&value[..m.start()]);
        for part in &self.parts {
            match part {
                Part::Literal(s) => out.push_str(s),
                Part::Group(i) => out.push_str(caps.get(*i).map_or("", |g| g.as_str())),
                Part::Named(n) => out.push_str(caps.name(n).map_or("", |g| g.as_str())),
                Part::Schema => out.push_str(table.0),
                Part::Table => out.push_str(table.1),
            }
        }
        out.push_str(&value[m.end()..]);
        out
    }
}

/// Java's `Matcher.appendExpandedReplacement`, checked once at configuration time: `\x` is a
/// literal `x`, `${name}` a named group, `$n` a numbered group (further digits are taken while the
/// number stays a valid group). walrelay adds `${schema}` and `${table}`, the row's table, for
/// one outbox per tenant (a group of those names in the regex comes first).
fn parse_replacement(rep: &str, re: &Regex) -> Result<Vec<Part>, String> {
    let group_count = re.captures_len() - 1;
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut chars = rep.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) => lit.push(e),
                None => return Err("ends with `\\`: character to be escaped is missing; write `\\\\` for a backslash".into()),
            },
            '$' => {
                if !lit.is_empty() {
                    parts.push(Part::Literal(std::mem::take(&mut lit)));
                }
                match chars.next() {
                    None => return Err("ends with `$`: group index is missing; write `\\$` for a dollar sign".into()),
                    Some('{') => {
                        let mut name = String::new();
                        while let Some(&n) = chars.peek() {
                            if !n.is_ascii_alphanumeric() {
                                break;
                            }
                            name.push(n);
                            chars.next();
                        }
                        if name.is_empty() {
                            return Err("`${}` names no group; write `${name}`".into());
                        }
                        if chars.next() != Some('}') {
                            return Err(format!("`${{{name}` is missing its closing `}}`"));
                        }
                        // A group of the regex first, as Java would; then the row's table.
                        if re.capture_names().flatten().any(|n| n == name) {
                            parts.push(Part::Named(name));
                        } else if name == "schema" {
                            parts.push(Part::Schema);
                        } else if name == "table" {
                            parts.push(Part::Table);
                        } else {
                            return Err(format!(
                                "refers to group `{name}`, which route.topic.regex does not define; \
                                 add `(?<{name}>…)` to the regex or fix the name (`${{schema}}` \
                                 and `${{table}}` are the row's table)"
                            ));
                        }
                    }
                    Some(d) if d.is_ascii_digit() => {
                        let mut n = d as usize - '0' as usize;
                        while let Some(&next) = chars.peek() {
                            let Some(digit) = next.to_digit(10) else { break };
                            let candidate = n * 10 + digit as usize;
                            if candidate > group_count {
                                break;
                            }
                            n = candidate;
                            chars.next();
                        }
                        if n > group_count {
                            return Err(format!(
                                "refers to group {n}, but route.topic.regex has {group_count} group(s)"
                            ));
                        }
                        parts.push(Part::Group(n));
                    }
                    Some(other) => {
                        return Err(format!(
                            "illegal group reference `${other}`; use `$n`, `${{name}}`, or `\\$` for a dollar sign"
                        ))
                    }
                }
            }
            c => lit.push(c),
        }
    }
    if !lit.is_empty() {
        parts.push(Part::Literal(lit));
    }
    Ok(parts)
}

/// Kafka's topic-name rules (`org.apache.kafka.common.internals.Topic.validate`): why `t` is not
/// a topic name, phrased to follow "… is not a legal Kafka topic name: ".
pub fn validate_topic(t: &str) -> Result<(), String> {
    if t.is_empty() {
        return Err("it is empty".into());
    }
    if t == "." || t == ".." {
        return Err("`.` and `..` are not allowed".into());
    }
    if t.len() > MAX_TOPIC_LEN {
        return Err(format!(
            "it is {} characters long; Kafka allows at most {MAX_TOPIC_LEN}",
            t.len()
        ));
    }
    if let Some(c) =
        t.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "it contains {c:?}; Kafka allows only ASCII letters, digits, `.`, `_` and `-`"
        ));
    }
    Ok(())
}
