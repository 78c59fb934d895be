//! A nats-server in operator (JWT) mode, as a deployment managed with `nsc` runs it: the server
//! trusts an operator, knows the accounts the operator signed from `resolver_preload` (a
//! MEMORY resolver), and lets in a user whose JWT one of those accounts signed and who proves
//! it holds the user's NKey (the `.creds` file's seed signs the server's nonce).
//!
//! The keys and JWTs are minted here as `nsc` mints them (github.com/nats-io/jwt v2): the
//! header `{"typ":"JWT","alg":"ed25519-nkey"}`, the claims with their `jti` (base32 of the
//! SHA-512/256 of the standard claims serialised without it), an ed25519 signature of
//! `header.claims` by the issuer's NKey, each part base64url without padding. nats-server
//! verifies the signature, the issuer's key type, `exp` and `nbf`; it does not recompute `jti`,
//! but nsc's is reproduced all the same so the files are what a deployment has.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use nkeys::KeyPair;
use serde_json::{json, Map, Value};

use super::NatsServer;
use crate::support::{free_port, scratch_dir};

/// `.creds` files for a [`private_nats_with_operator`] server, each as `nsc generate creds`
/// writes it (mode 0600).
pub struct OperatorCreds {
    /// A user of the account the server knows (JetStream enabled, no limits): it gets in.
    pub user: PathBuf,
    /// A user of an account the operator signed but the server was never given: refused.
    pub stranger: PathBuf,
    /// A user of the known account whose JWT expired a minute ago: refused.
    pub expired: PathBuf,
    /// The known user's JWT with another user's seed, which cannot sign for it: refused.
    pub wrong_seed: PathBuf,
    /// A user of the known account whose JWT the account revoked (its `revocations`, as
    /// `nsc revocations add-user` writes them): refused.
    pub revoked: PathBuf,
}

/// A private nats-server with JetStream in operator mode, on a free port, and the `.creds`
/// files of [`OperatorCreds`]. Blocking; killed on drop.
pub fn private_nats_with_operator() -> (NatsServer, OperatorCreds) {
    let dir = scratch_dir("nats_operator");
    let now = unix_now();
    let operator = KeyPair::new_operator();
    let system = KeyPair::new_account();
    let account = KeyPair::new_account();
    let stranger = KeyPair::new_account();

    let operator_claims = json!({
        "system_account": system.public_key(),
        "type": "operator",
        "version": 2,
    });
    let operator_jwt =
        jwt(&operator, &operator.public_key(), "walrelay-test", now, None, operator_claims);
    // A system account, as `nsc generate config --mem-resolver` names one: the server's own
    // events and requests live there. No JetStream in it, as nsc makes it.
    let system_jwt =
        jwt(&operator, &system.public_key(), "SYS", now, None, account_claims(false, None));

    let (relay_jwt, relay_seed, _) = user(&account, "relay", now, None);
    let (stranger_jwt, stranger_seed, _) = user(&stranger, "stranger", now, None);
    let (expired_jwt, expired_seed, _) = user(&account, "expired", now - 3600, Some(now - 60));
    // Issued a minute ago and revoked now: the server refuses a user JWT issued at or before
    // the time its account's `revocations` give for the user's key.
    let (revoked_jwt, revoked_seed, revoked_key) = user(&account, "revoked", now - 60, None);
    let revocations = json!({ revoked_key: now });
    let account_jwt = jwt(
        &operator,
        &account.public_key(),
        "walrelay",
        now,
        None,
        account_claims(true, Some(revocations)),
    );
    let creds = OperatorCreds {
        user: write_creds(&dir.join("relay.creds"), &relay_jwt, &relay_seed),
        stranger: write_creds(&dir.join("stranger.creds"), &stranger_jwt, &stranger_seed),
        expired: write_creds(&dir.join("expired.creds"), &expired_jwt, &expired_seed),
        wrong_seed: write_creds(&dir.join("wrong-seed.creds"), &relay_jwt, &stranger_seed),
        revoked: write_creds(&dir.join("revoked.creds"), &revoked_jwt, &revoked_seed),
    };

    let operator_path = dir.join("operator.jwt");
    write(&operator_path, &operator_jwt);
    // `debug` logs why a login was refused ("account missing", "claim is expired", "Signature
    // not verified"); the client is told only "authorization violation".
    let conf = dir.join("operator.conf");
    write(
        &conf,
        &format!(
            "debug: true\noperator: \"{}\"\nsystem_account: {sys}\nresolver: MEMORY\nresolver_preload: {{\n  \
             {sys}: \"{system_jwt}\"\n  {acc}: \"{account_jwt}\"\n}}\n",
            operator_path.display(),
            sys = system.public_key(),
            acc = account.public_key(),
        ),
    );
    let conf = conf.display().to_string();
    let server = NatsServer::launch(&dir, free_port(), &["-c", &conf])
        .unwrap_or_else(|e| panic!("private NATS server in operator mode: {e}"));
    (server, creds)
}

/// An account's `nats` claims as `nsc add account` writes them, every limit unlimited (-1);
/// JetStream is on only when its storage limits are not 0. `revocations`: user key → the time
/// before which (inclusive) its JWTs are revoked.
fn account_claims(jetstream: bool, revocations: Option<Value>) -> Value {
    let js = if jetstream { -1 } else { 0 };
    let mut claims = json!({
        "limits": {
            "subs": -1, "data": -1, "payload": -1,
            "imports": -1, "exports": -1, "wildcards": true, "conn": -1, "leaf": -1,
            "mem_storage": js, "disk_storage": js, "streams": js, "consumer": js,
        },
        "default_permissions": { "pub": {}, "sub": {} },
        "type": "account",
        "version": 2,
    });
    if let Some(revocations) = revocations {
        claims["revocations"] = revocations;
    }
    claims
}

/// A user JWT that `account` signs (valid from `issued_at`, until `expires` when given), the
/// user's seed and its public key.
fn user(
    account: &KeyPair,
    name: &str,
    issued_at: i64,
    expires: Option<i64>,
) -> (String, String, String) {
    let user = KeyPair::new_user();
    let claims = json!({
        "pub": {}, "sub": {},
        "subs": -1, "data": -1, "payload": -1,
        "type": "user",
        "version": 2,
    });
    let token = jwt(account, &user.public_key(), name, issued_at, expires, claims);
    let seed = user.seed().unwrap_or_else(|e| panic!("the seed of a new user key: {e}"));
    (token, seed, user.public_key())
}

/// Writes [`creds_file`] to `path`, readable by its owner only (as nsc does).
fn write_creds(path: &Path, jwt: &str, seed: &str) -> PathBuf {
    write(path, &creds_file(jwt, seed));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod 600 {}: {e}", path.display()));
    path.to_path_buf()
}

/// A `.creds` file, byte for byte as nsc writes it (jwt's `FormatUserConfig`).
pub fn creds_file(jwt: &str, seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    )
}

/// A v2 JWT of `subject` that `issuer` signs, with the type-specific claims `nats`.
fn jwt(
    issuer: &KeyPair,
    subject: &str,
    name: &str,
    issued_at: i64,
    expires: Option<i64>,
    nats: Value,
) -> String {
    // The standard claims in the order of jwt's ClaimsData (aud, exp, jti, iat, iss, name, nbf,
    // sub; empty ones left out): jti is the hash of them serialised without jti.
    let mut claims = Map::new();
    if let Some(exp) = expires {
        claims.insert("exp".into(), json!(exp));
    }
    claims.insert("iat".into(), json!(issued_at));
    claims.insert("iss".into(), json!(issuer.public_key()));
    claims.insert("name".into(), json!(name));
    claims.insert("sub".into(), json!(subject));
    let standard = serde_json::to_vec(&claims).unwrap_or_else(|e| panic!("claims to JSON: {e}"));
    let hash = ring::digest::digest(&ring::digest::SHA512_256, &standard);
    claims.insert("jti".into(), json!(data_encoding::BASE32_NOPAD.encode(hash.as_ref())));
    claims.insert("nats".into(), nats);

    let header = URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let payload = serde_json::to_vec(&claims).unwrap_or_else(|e| panic!("claims to JSON: {e}"));
    let signed = format!("{header}.{}", URL_SAFE_NO_PAD.encode(payload));
    let signature = issuer.sign(signed.as_bytes()).unwrap_or_else(|e| panic!("signing a JWT: {e}"));
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_else(|e| panic!("the clock is before 1970: {e}"))
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}
