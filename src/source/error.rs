//! What a PostgreSQL error means for the relay, decided by SQLSTATE and by error kind — never by
//! message text, which the server translates (`lc_messages`) and reworded between versions.
//!
//! Like Materialize's rule, an error is transient unless its code proves otherwise: a retry from
//! the slot's confirmed position replays, it never skips, so being wrong that way costs a loop
//! of retries (with the error in the log), not an event.

use pgwire_replication::PgWireError;
use tokio_postgres::error::SqlState;

use crate::error::Error;

/// What an error asks of the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Try again after a backoff: connection lost, server starting or shutting down, out of
    /// connection slots, statement timed out.
    Transient,
    /// The slot is in use by another process (`55006 object_in_use`): stand by.
    SlotInUse,
    /// An object the relay names does not exist (`42704`); which one the catalog tells.
    Missing,
    /// The object is in the wrong state (`55000`): an invalidated slot, `wal_level` too low.
    WrongState,
    /// Credentials or privileges (`28xxx`, `42501`).
    Denied,
    /// The database named does not exist (`3D000`).
    NoDatabase,
    /// WAL the slot needs was already removed (`58P01`).
    WalRemoved,
    /// TLS could not be set up or the certificate was refused.
    Tls,
    /// The request itself is wrong (bad option, unsupported feature): retrying repeats it.
    Invalid,
}

impl Class {
    pub fn of_sqlstate(code: &SqlState) -> Class {
        let class = &code.code()[..2];
        match code {
            c if *c == SqlState::OBJECT_IN_USE => Class::SlotInUse,
            c if *c == SqlState::UNDEFINED_OBJECT => Class::Missing,
            c if *c == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE => Class::WrongState,
            c if *c == SqlState::INSUFFICIENT_PRIVILEGE => Class::Denied,
            c if *c == SqlState::INVALID_CATALOG_NAME => Class::NoDatabase,
            c if *c == SqlState::UNDEFINED_FILE => Class::WalRemoved,
            c if *c == SqlState::INVALID_PARAMETER_VALUE
                || *c == SqlState::FEATURE_NOT_SUPPORTED
                || *c == SqlState::SYNTAX_ERROR
                || *c == SqlState::INVALID_NAME =>
            {
                Class::Invalid
            }
            _ if class == "28" => Class::Denied,
            _ => Class::Transient,
        }
    }
}

/// The SQLSTATE of a server error reported by the replication client. pgwire-replication keeps
/// the server's code as the text's `(SQLSTATE xxxxx)` suffix; the code itself is never
/// translated.
pub fn wire_sqlstate(e: &PgWireError) -> Option<SqlState> {
    let PgWireError::Server(text) = e else {
        return None;
    };
    let at = text.rfind("(SQLSTATE ")?;
    let code = text[at + "(SQLSTATE ".len()..].strip_suffix(')')?;
    (code.len() == 5).then(|| SqlState::from_code(code))
}

/// Classifies an error of the replication connection.
pub fn wire_class(e: &PgWireError) -> Class {
    match e {
        PgWireError::Tls(_) => Class::Tls,
        // Raised by the client itself: an authentication method it cannot do.
        PgWireError::Auth(_) => Class::Denied,
        PgWireError::Server(_) => {
            wire_sqlstate(e).map_or(Class::Transient, |c| Class::of_sqlstate(&c))
        }
        _ => Class::Transient,
    }
}

/// Classifies an error of the control connection.
pub fn pg_class(e: &tokio_postgres::Error) -> Class {
    if let Some(code) = e.code() {
        return Class::of_sqlstate(code);
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.downcast_ref::<rustls::Error>().is_some() {
            return Class::Tls;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            // tokio-postgres-rustls reports handshake failures as io errors wrapping rustls'.
            if io.get_ref().is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()) {
                return Class::Tls;
            }
            return Class::Transient;
        }
        cause = c.source();
    }
    // No server code and no I/O cause: a configuration the client cannot use, such as a
    // password the server asks for and the URL lacks (tokio-postgres' own wording, which is
    // not translated).
    if !e.is_closed() && e.to_string().starts_with("invalid configuration") {
        return Class::Denied;
    }
    Class::Transient
}

pub const TLS_HINT: &str = "check sslmode and sslrootcert in [source] url: the CA must sign the server's certificate, and verify-full needs the host name in it";
pub const DENIED_HINT: &str =
    "check [source] url and PGPASSWORD / the password file: the role, its password, its REPLICATION attribute and privileges, and pg_hba.conf";

/// A control-connection error as a relay error: `what` says what was being done.
pub fn classify_pg(what: &str, e: tokio_postgres::Error) -> Error {
    match pg_class(&e) {
        Class::Tls => Error::definite_with(what, TLS_HINT, e),
        Class::Denied => Error::definite_with(what, DENIED_HINT, e),
        Class::NoDatabase => Error::definite_with(
            what,
            "the database named in [source] url (or PGDATABASE) does not exist; fix the name",
            e,
        ),
        Class::Invalid => {
            Error::definite_with(what, "report this as a bug, with the server version", e)
        }
        _ => Error::transient(what, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstate_is_read_from_the_code_not_the_words() {
        // The same error under lc_messages = 'de_DE.UTF-8'.
        let e = PgWireError::Server(
            "Replikations-Slot »s« ist aktiv für PID 4242 (SQLSTATE 55006)".into(),
        );
        assert_eq!(wire_sqlstate(&e), Some(SqlState::OBJECT_IN_USE));
        assert_eq!(wire_class(&e), Class::SlotInUse);
        let e = PgWireError::Server(
            "Passwort-Authentifizierung fehlgeschlagen (SQLSTATE 28P01)".into(),
        );
        assert_eq!(wire_class(&e), Class::Denied);
        let e = PgWireError::Server("no code at all".into());
        assert_eq!(wire_class(&e), Class::Transient);
    }

    #[test]
    fn sqlstate_classes_decide_what_happens_next() {
        for (code, class) in [
            ("55006", Class::SlotInUse),
            ("42704", Class::Missing),
            ("55000", Class::WrongState),
            ("28000", Class::Denied),
            ("42501", Class::Denied),
            ("3D000", Class::NoDatabase),
            ("58P01", Class::WalRemoved),
            ("57P01", Class::Transient),
            ("57P03", Class::Transient),
            ("53300", Class::Transient),
            ("08006", Class::Transient),
            ("XX000", Class::Transient),
        ] {
            assert_eq!(Class::of_sqlstate(&SqlState::from_code(code)), class, "{code}");
        }
    }
}
