//! Standard Webhooks' signature (standardwebhooks.com, "Signature scheme"): HMAC-SHA256, under
//! the secret's bytes, of `{webhook-id}.{webhook-timestamp}.{body}`, sent base64-encoded as
//! `v1,<signature>` in `webhook-signature`. The secret is written `whsec_<base64>`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// A signing secret, decoded. Its bytes are never printed.
#[derive(Clone)]
pub struct Secret(ring::hmac::Key, Vec<u8>);

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.1 == other.1
    }
}

impl Eq for Secret {}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(****)")
    }
}

impl Secret {
    /// Reads `whsec_<base64>`; the error says what is wrong without the value.
    pub fn parse(text: &str) -> Result<Secret, String> {
        let Some(encoded) = text.strip_prefix("whsec_") else {
            return Err("must be Standard Webhooks' form whsec_<base64 of 24 to 64 random bytes>, e.g. from `openssl rand -base64 32` prefixed with whsec_".into());
        };
        let bytes = STANDARD
            .decode(encoded)
            .map_err(|e| format!("the part after whsec_ is not base64 ({e})"))?;
        if !(24..=64).contains(&bytes.len()) {
            return Err(format!(
                "decodes to {} bytes; Standard Webhooks asks for 24 to 64 (e.g. `openssl rand -base64 32`)",
                bytes.len()
            ));
        }
        Ok(Secret(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes), bytes))
    }

    /// `webhook-signature`'s value for a message.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut ctx = ring::hmac::Context::with_key(&self.0);
        ctx.update(id.as_bytes());
        ctx.update(b".");
        ctx.update(timestamp.to_string().as_bytes());
        ctx.update(b".");
        ctx.update(body);
        format!("v1,{}", STANDARD.encode(ctx.sign().as_ref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's own example (its README, "Signature scheme"): this secret, id,
    /// timestamp and payload sign to this value.
    #[test]
    fn signs_the_specifications_example_to_its_signature() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            secret.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_secret_not_in_whsec_form_is_refused_without_its_value() {
        let e = Secret::parse("hunter2hunter2hunter2hunter2").unwrap_err();
        assert!(e.contains("whsec_") && !e.contains("hunter2"), "{e}");
        let e = Secret::parse("whsec_c2hvcnQ=").unwrap_err();
        assert!(e.contains("5 bytes"), "{e}");
        let e = Secret::parse("whsec_!!!").unwrap_err();
        assert!(e.contains("not base64"), "{e}");
    }
}
