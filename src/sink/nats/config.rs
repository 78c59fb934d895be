//! `[nats]`: where the NATS server is, how walrelay logs in, how long it waits for a PubAck,
//! and the stream `walrelay setup` creates.
//!
//! Secrets (`password`, `token`, a password in `url`) usually come from the environment
//! (`WALRELAY_NATS_URL`, `WALRELAY_NATS_PASSWORD`, `WALRELAY_NATS_TOKEN`); no message here
//! prints one.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use crate::options::secret::MASK;
use crate::options::{invalid, required, section, ConfigError, Options};

/// `[nats]`, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct NatsConfig {
    /// `nats://host:port` (or `tls://`), possibly with `user:password@`.
    pub url: String,
    pub login: Login,
    /// How long a publish waits for its PubAck (and a connect for the server), default 10 s.
    pub timeout: Duration,
    /// The stream `walrelay setup` creates or updates, default `walrelay`.
    pub stream: String,
    /// The subjects that stream captures; empty = the routed subjects setup is given.
    pub stream_subjects: Vec<String>,
    /// The stream's `duplicate_window`: how long JetStream remembers a `Nats-Msg-Id`.
    pub duplicate_window: Duration,
}

/// How walrelay logs in besides what `url` carries.
#[derive(Clone, PartialEq, Eq)]
pub enum Login {
    /// None, or the `user:password@` of the URL.
    Url,
    UserPassword {
        user: String,
        password: String,
    },
    Token(String),
    /// A `.creds` file (a user JWT and its NKey seed), as `nsc` writes it.
    CredentialsFile(PathBuf),
}

impl std::fmt::Debug for Login {
    /// Passwords and tokens are secrets: their presence only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Login::Url => write!(f, "Url"),
            Login::UserPassword { user, .. } => write!(f, "UserPassword({user:?}, {MASK})"),
            Login::Token(_) => write!(f, "Token({MASK})"),
            Login::CredentialsFile(path) => write!(f, "CredentialsFile({})", path.display()),
        }
    }
}

impl std::fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConfig")
            .field("url", &shown_url(&self.url))
            .field("login", &self.login)
            .field("timeout", &self.timeout)
            .field("stream", &self.stream)
            .field("stream_subjects", &self.stream_subjects)
            .field("duplicate_window", &self.duplicate_window)
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Raw {
    url: Option<String>,
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
    credentials_file: Option<String>,
    timeout: Option<String>,
    stream: Option<String>,
    /// Comma-joined, as every list.
    stream_subjects: Option<String>,
    duplicate_window: Option<String>,
}

const S: &str = "nats";

/// Checks `[nats]`.
pub fn parse(opts: &Options) -> Result<NatsConfig, ConfigError> {
    let raw: Raw = section::from_options(S, opts)?;
    let url = required(
        S,
        raw.url.filter(|u| !u.trim().is_empty()),
        "url",
        "set url = \"nats://127.0.0.1:4222\" (or WALRELAY_NATS_URL, which may carry user:password@)",
    )?;
    check_url(&url)?;
    let login = login(raw.user, raw.password, raw.token, raw.credentials_file)?;
    let url_has_login = async_nats::ServerAddr::from_str(&url).is_ok_and(|a| a.has_user_pass());
    if url_has_login && login != Login::Url {
        return Err(invalid(
            S,
            "url",
            &shown_url(&url),
            "carries a login (user:password@) and user, token or credentials_file is set too: give one",
        ));
    }
    let duration = |key: &str, text: Option<String>, default: Duration| match text {
        None => Ok(default),
        Some(text) => match crate::duration::parse(&text) {
            Ok(d) if d.is_zero() => Err(invalid(S, key, &text, "must be at least 1s")),
            Ok(d) => Ok(d),
            Err(reason) => Err(invalid(S, key, &text, &reason)),
        },
    };
    let timeout = duration("timeout", raw.timeout, Duration::from_secs(10))?;
    let duplicate_window =
        duration("duplicate_window", raw.duplicate_window, Duration::from_secs(120))?;
    let stream = raw.stream.unwrap_or_else(|| "walrelay".to_string());
    if stream.is_empty() || stream.contains(|c: char| c.is_whitespace() || ".*>/\\".contains(c)) {
        return Err(invalid(
            S,
            "stream",
            &stream,
            "a stream name is one word without spaces, '.', '*', '>', '/' or '\\', e.g. \"walrelay\"",
        ));
    }
    let stream_subjects = match raw.stream_subjects {
        Some(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|s| {
                let s = s.trim();
                stream_subject(s).map(|()| s.to_string())
            })
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    Ok(NatsConfig { url, login, timeout, stream, stream_subjects, duplicate_window })
}

/// `url` with any user info (`user:password@`, and a bare `token@`, which the usual URL
/// redaction leaves alone) replaced by `****`, for every message that names the server.
pub fn shown_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => format!("{scheme}://{MASK}{}", &rest[at..]),
                None => url.to_string(),
            }
        }
        None => crate::options::secret::redact_url(url),
    }
}

fn check_url(url: &str) -> Result<(), ConfigError> {
    let shown = shown_url(url);
    let scheme_ok = ["nats://", "tls://"].iter().any(|s| url.starts_with(s));
    if !scheme_ok {
        return Err(invalid(
            S,
            "url",
            &shown,
            "must start with nats:// (or tls://), e.g. \"nats://127.0.0.1:4222\"",
        ));
    }
    async_nats::ServerAddr::from_str(url).map(|_| ()).map_err(|_| {
        invalid(
            S,
            "url",
            &shown,
            "is not a server address: write nats://host:port, e.g. \"nats://127.0.0.1:4222\"",
        )
    })
}

fn login(
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
    credentials_file: Option<String>,
) -> Result<Login, ConfigError> {
    let set = |v: Option<String>| v.filter(|v| !v.is_empty());
    let (user, password, token, file) =
        (set(user), set(password), set(token), set(credentials_file));
    let ways = [user.is_some() || password.is_some(), token.is_some(), file.is_some()];
    if ways.iter().filter(|w| **w).count() > 1 {
        return Err(invalid(
            S,
            "user",
            "",
            "give one way to log in: user and password, token, or credentials_file",
        ));
    }
    Ok(match (user, password, token, file) {
        (Some(user), Some(password), _, _) => Login::UserPassword { user, password },
        (Some(_), None, _, _) => {
            return Err(invalid(
                S,
                "password",
                "",
                "user is set without a password: set WALRELAY_NATS_PASSWORD (or [nats] password)",
            ))
        }
        (None, Some(_), _, _) => {
            return Err(invalid(S, "user", "", "password is set without a user: set user"))
        }
        (None, None, Some(token), _) => Login::Token(token),
        (None, None, None, Some(file)) => Login::CredentialsFile(PathBuf::from(file)),
        (None, None, None, None) => Login::Url,
    })
}

/// A subject a stream may capture: dot-separated tokens, `*` for one token, `>` for the rest.
fn stream_subject(subject: &str) -> Result<(), ConfigError> {
    let tokens: Vec<&str> = subject.split('.').collect();
    let last = tokens.len() - 1;
    let bad = tokens.iter().enumerate().find_map(|(i, t)| {
        if t.is_empty() {
            Some("has an empty token (two dots in a row, or a dot at an end)")
        } else if t.contains(char::is_whitespace) {
            Some("holds a space")
        } else if *t == ">" && i != last {
            Some("has '>' before its last token")
        } else if t.len() > 1 && t.contains(['*', '>']) {
            Some("has '*' or '>' inside a token: they stand alone between dots")
        } else {
            None
        }
    });
    match bad {
        Some(why) => Err(invalid(
            S,
            "stream_subjects",
            subject,
            &format!(
                "{why}; write subjects like \"outbox.event.>\" or \"orders.*\", comma-separated"
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Options {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn refused(pairs: &[(&str, &str)]) -> String {
        parse(&opts(pairs)).expect_err("refused").to_string()
    }

    #[test]
    fn defaults() {
        let c = parse(&opts(&[("url", "nats://127.0.0.1:4222")])).unwrap();
        assert_eq!(c.login, Login::Url);
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.stream, "walrelay");
        assert!(c.stream_subjects.is_empty());
        assert_eq!(c.duplicate_window, Duration::from_secs(120));
    }

    #[test]
    fn every_key() {
        let c = parse(&opts(&[
            ("url", "nats://127.0.0.1:4222"),
            ("user", "relay"),
            ("password", "s3cret-pw"),
            ("timeout", "3s"),
            ("stream", "outbox"),
            ("stream_subjects", "outbox.event.>, orders.*"),
            ("duplicate_window", "10m"),
        ]))
        .unwrap();
        assert_eq!(
            c.login,
            Login::UserPassword { user: "relay".into(), password: "s3cret-pw".into() }
        );
        assert_eq!(c.stream_subjects, ["outbox.event.>", "orders.*"]);
        assert_eq!(c.duplicate_window, Duration::from_secs(600));
        assert!(!format!("{c:?}").contains("s3cret-pw"), "{c:?}");
    }

    #[test]
    fn url_is_required_and_checked() {
        assert!(refused(&[]).contains("missing required key `url`"));
        let e = refused(&[("url", "http://u:hunter2@host:4222")]);
        assert!(e.contains("must start with nats://"), "{e}");
        assert!(!e.contains("hunter2"), "the password is shown: {e}");
        let e = refused(&[("url", "http://s3cret-token@host:4222")]);
        assert!(!e.contains("s3cret-token"), "the token is shown: {e}");
        assert_eq!(shown_url("nats://tok@h:4222"), "nats://****@h:4222");
        assert_eq!(shown_url("nats://u:p@w@h:4222/x"), "nats://****@h:4222/x");
        assert_eq!(shown_url("nats://h:4222"), "nats://h:4222");
    }

    #[test]
    fn one_way_to_log_in() {
        let e = refused(&[("url", "nats://h:4222"), ("token", "t0ken-value"), ("user", "u")]);
        assert!(e.contains("one way to log in"), "{e}");
        assert!(!e.contains("t0ken-value"), "{e}");
        let e = refused(&[("url", "nats://h:4222"), ("user", "u")]);
        assert!(e.contains("WALRELAY_NATS_PASSWORD"), "{e}");
        let e = refused(&[("url", "nats://h:4222"), ("password", "p")]);
        assert!(e.contains("without a user"), "{e}");
        let e = refused(&[("url", "nats://u:url-pw@h:4222"), ("token", "t")]);
        assert!(e.contains("give one") && !e.contains("url-pw"), "{e}");
        let e = refused(&[("url", "nats://url-token@h:4222"), ("user", "u"), ("password", "p")]);
        assert!(e.contains("give one") && !e.contains("url-token"), "{e}");
    }

    #[test]
    fn durations_have_a_unit_and_are_not_zero() {
        let e = refused(&[("url", "nats://h:4222"), ("timeout", "10")]);
        assert!(e.contains("`timeout`") && e.contains("one unit"), "{e}");
        let e = refused(&[("url", "nats://h:4222"), ("duplicate_window", "0s")]);
        assert!(e.contains("at least 1s"), "{e}");
    }

    #[test]
    fn stream_names_and_subjects() {
        let e = refused(&[("url", "nats://h:4222"), ("stream", "out.box")]);
        assert!(e.contains("`stream`"), "{e}");
        for bad in ["a..b", "a.>.b", "a b", "a.b*", ".a"] {
            let e = refused(&[("url", "nats://h:4222"), ("stream_subjects", bad)]);
            assert!(e.contains("`stream_subjects`"), "{bad}: {e}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = refused(&[("url", "nats://h:4222"), ("subject", "x")]);
        assert!(e.contains("unknown key `subject`"), "{e}");
    }
}
