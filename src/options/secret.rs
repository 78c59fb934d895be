//! What counts as a secret, and how a message shows a value that may hold one: never (named by
//! its key and its type), or with the secret replaced by `****`.
//!
//! Secrets are recognised by the key names the projects walrelay borrows options from use:
//! Debezium (`database.password`), librdkafka (`sasl.password`, `ssl.key.password`,
//! `ssl.key.pem`, `sasl.oauthbearer.client.secret`, `sasl.oauthbearer.config`), the Java client
//! (`sasl.jaas.config`, `ssl.keystore.key`) and libpq (`password=` in a connection string, the
//! password of a URL, `PGPASSWORD`). Everything configuration-related walrelay prints passes through here: the
//! errors of [`crate::config`] and `import-debezium`, `Debug` output, `check` and `status`.

use std::ops::Range;
use std::sync::OnceLock;

use regex::Regex;

/// Fragments of a key name (lower case, `_` read as `.`) that make its value a secret. Broad on
/// purpose: hiding a value that was harmless costs a line of clarity, showing a secret costs a
/// rotated credential.
const SECRET_FRAGMENTS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "jaas",
    "credential",
    "key.pem",
    "keystore.key",
    "private.key",
    "oauthbearer.config",
    "api.key",
    "apikey",
];

/// Shown in place of a secret.
pub const MASK: &str = "****";

/// Whether the value of `key` is a secret (`sasl.password`, `PGPASSWORD`, `client_secret`, …).
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace('_', ".");
    SECRET_FRAGMENTS.iter().any(|fragment| key.contains(fragment))
}

/// What a message says instead of a value it may not show: its type, never its text.
pub fn describe_hidden(value: &str) -> String {
    let kind = if value.is_empty() {
        "an empty string"
    } else if value.parse::<f64>().is_ok() {
        "a number"
    } else if value == "true" || value == "false" {
        "a boolean"
    } else {
        "a string"
    };
    format!("{kind}, not shown")
}

/// `value` as a message may show it for `key`: hidden for a secret key, with any password a
/// connection string or URL carries replaced by `****` otherwise.
pub fn shown(key: &str, value: &str) -> String {
    if is_secret_key(key) {
        format!("({})", describe_hidden(value))
    } else {
        format!("{:?}", redact_url(value))
    }
}

/// The text with the password of every URL (`scheme://user:password@host`) and every libpq
/// `password=` (in a `key=value` string or a URL's query) replaced by `****`. Made for damaged
/// input too: the password runs to the last `@` of the URL, so one with a stray `/` or `?` in it
/// is still hidden (and some of the host with it).
pub fn redact_url(text: &str) -> String {
    let mut spans = password_spans(text);
    if spans.is_empty() {
        return text.to_string();
    }
    spans.sort_by_key(|s| s.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in spans {
        if span.start < at {
            // Overlapping spans: extend the one already masked.
            at = at.max(span.end);
            continue;
        }
        out.push_str(&text[at..span.start]);
        out.push_str(MASK);
        at = span.end;
    }
    out.push_str(&text[at..]);
    out
}

/// Where passwords sit in `text`: URL user-info passwords and libpq `password=` values.
fn password_spans(text: &str) -> Vec<Range<usize>> {
    static URL: OnceLock<Regex> = OnceLock::new();
    static KEY_VALUE: OnceLock<Regex> = OnceLock::new();
    static USER_INFO: OnceLock<Regex> = OnceLock::new();
    // `scheme:` (`//` and the user optional, so a URL damaged by a typo is still covered), a
    // `:`, then anything up to the last `@` of the URL (whitespace and quotes end a URL in
    // every file walrelay reads).
    let url = URL.get_or_init(|| {
        Regex::new(r#"[A-Za-z][A-Za-z0-9+.\-]*:[^\s@:"'`]*:([^\s"'`]*)@"#)
            .expect("a valid regular expression")
    });
    // `password = value`, `password='quoted \' value'`, `?password=value&…`.
    let key_value = KEY_VALUE.get_or_init(|| {
        Regex::new(r#"(?i)password\s*=\s*('(?:[^'\\]|\\.)*'?|[^\s&"'`]*)"#)
            .expect("a valid regular expression")
    });
    // `user:password@` wherever it stands, for URLs a typo broke before the user (`postgres://
    // walrelay:…@`, `postgres://x'/walrelay:…@`), which libpq may still accept.
    let user_info = USER_INFO.get_or_init(|| {
        Regex::new(r#"[^\s@:"'`/]+:([^\s"'`@/:]+)@"#).expect("a valid regular expression")
    });
    let mut spans = Vec::new();
    for caps in url.captures_iter(text).chain(user_info.captures_iter(text)) {
        let m = caps.get(1).expect("group 1 always takes part");
        if !m.is_empty() {
            spans.push(m.range());
        }
    }
    for caps in key_value.captures_iter(text) {
        let m = caps.get(1).expect("group 1 always takes part");
        if !m.is_empty() {
            spans.push(m.range());
        }
    }
    spans
}

/// Every secret `text` appears to hold, read leniently so that it works on input that does not
/// parse: passwords of URLs and connection strings, and the values of secret keys on lines like
/// `key = value`, `key: value`, `"key": "value"` (TOML, `.properties`, JSON).
pub fn secrets_in(text: &str) -> Vec<String> {
    static ASSIGNMENT: OnceLock<Regex> = OnceLock::new();
    let assignment = ASSIGNMENT.get_or_init(|| {
        Regex::new(r#"["']?([A-Za-z0-9_.\-]+)["']?\s*[=:]\s*["']?([^"'\r\n,}]*)"#)
            .expect("a valid regular expression")
    });
    let mut found: Vec<String> =
        password_spans(text).into_iter().map(|span| text[span].to_string()).collect();
    for caps in assignment.captures_iter(text) {
        let (key, value) = (&caps[1], caps[2].trim());
        if is_secret_key(key) {
            found.push(value.to_string());
        }
    }
    found.retain(|s| worth_scrubbing(s));
    found.sort();
    found.dedup();
    found
}

/// Masking a one- or two-character "secret" everywhere would garble every message and protect
/// nothing, and a placeholder is not a secret.
fn worth_scrubbing(secret: &str) -> bool {
    secret.chars().count() >= 3 && secret != MASK && !secret.starts_with("${")
}

/// `text` with each of `secrets` replaced by `****`: the last line of defence for messages built
/// from input that did not parse, where no key says which value is a secret.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = redact_url(text);
    for secret in secrets.iter().filter(|s| worth_scrubbing(s)) {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), MASK);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_keys_are_recognised_in_every_project_spelling() {
        for key in [
            "database.password",
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.key.pem",
            "ssl.keystore.key",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.config",
            "sasl.jaas.config",
            "PGPASSWORD",
            "password",
            "client_secret",
        ] {
            assert!(is_secret_key(key), "{key}");
        }
        for key in ["bootstrap.servers", "url", "slot", "route.topic.replacement", "database.user"]
        {
            assert!(!is_secret_key(key), "{key}");
        }
    }

    #[test]
    fn passwords_are_masked_in_urls_and_connection_strings_even_damaged_ones() {
        for (text, shown) in [
            ("postgres://u:pw1@h:5/db", "postgres://u:****@h:5/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgres://u:p/w?x@h/db", "postgres://u:****@h/db"),
            ("postgres:u:pw1@h/db", "postgres:u:****@h/db"),
            ("postgresql://w/walrelay:pw1@h/db", "postgresql://w/walrelay:****@h/db"),
            ("postgresql:// walrelay:pw1@h/db", "postgresql:// walrelay:****@h/db"),
            ("postgres://x'/walrelay:pw1@h/db", "postgres://x'/walrelay:****@h/db"),
            ("postgres://u@h:5/db?sslrootcert=/a:b", "postgres://u@h:5/db?sslrootcert=/a:b"),
            ("host=h password=pw1 user=u", "host=h password=**** user=u"),
            ("host=h password = 'p w\\' 1' user=u", "host=h password = **** user=u"),
            (
                "postgres://u@h/db?password=pw1&sslmode=require",
                "postgres://u@h/db?password=****&sslmode=require",
            ),
            ("PASSWORD=pw1", "PASSWORD=****"),
        ] {
            assert_eq!(redact_url(text), shown, "{text}");
        }
    }

    #[test]
    fn secrets_are_found_in_text_that_does_not_parse() {
        let text = "[source\nurl = \"postgres://w:s3cret@127\".0.0.1/app\"\n\"sasl.password\" = \"hunter2\"\n{\"database.password\": \"dbz-pw\", x";
        let found = secrets_in(text);
        for secret in ["s3cret", "hunter2", "dbz-pw"] {
            assert!(found.iter().any(|f| f == secret), "{secret}: {found:?}");
        }
        let message = "line 2 has s3cret and hunter2 and dbz-pw";
        assert_eq!(scrub(message, &found), "line 2 has **** and **** and ****");
    }

    #[test]
    fn hidden_values_are_named_by_type() {
        assert_eq!(shown("sasl.password", "x1"), "(a string, not shown)");
        assert_eq!(shown("ssl.key.password", "12"), "(a number, not shown)");
        assert_eq!(shown("url", "postgres://u:p1@h/d"), "\"postgres://u:****@h/d\"");
    }
}
