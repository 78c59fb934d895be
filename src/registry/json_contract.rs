//! `use_latest_version` with JSON Schema values: the value is written as it is (plain JSON),
//! under the id of the subject's latest schema, once it validates against that schema. This is
//! what Confluent's JSON Schema serializer does with `use.latest.version` and
//! `json.fail.invalid.schema`: a team's hand-written contract, not the schema walrelay derives,
//! decides what may be published.

use serde_json::Value;

/// A subject's latest JSON Schema, compiled once per run and subject.
pub struct JsonContract {
    validator: jsonschema::Validator,
}

impl JsonContract {
    /// Compiles `text`; a schema that is not JSON, or not a valid JSON Schema, is refused with
    /// why. Its `$schema` picks the draft; without one, the latest the validator knows.
    pub fn parse(text: &str) -> Result<JsonContract, String> {
        let schema: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| format!("not a valid JSON Schema: {e}"))?;
        Ok(JsonContract { validator })
    }

    /// Whether `body` (a JSON value) fits; the first misfit names its place in the value (a
    /// JSON pointer, `/` for the whole value) and what the schema wants there.
    pub fn check(&self, body: &[u8]) -> Result<(), String> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| format!("the value is not JSON: {e}"))?;
        let misfit = self.validator.iter_errors(&value).next().map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_string() } else { at };
            format!("at {at}: {e}")
        });
        misfit.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTRACT: &str = r#"{"type":"object","properties":{"orderId":{"type":"string"},"amount":{"type":"integer"}},"required":["orderId","amount"]}"#;

    #[test]
    fn a_fitting_value_passes_and_a_misfit_names_its_place_and_the_rule() {
        let c = JsonContract::parse(CONTRACT).unwrap();
        assert_eq!(c.check(br#"{"orderId":"o-1","amount":3,"note":"x"}"#), Ok(()));
        let missing = c.check(br#"{"orderId":"o-2"}"#).unwrap_err();
        assert!(missing.starts_with("at /: ") && missing.contains("amount"), "{missing}");
        let wrong = c.check(br#"{"orderId":"o-3","amount":"three"}"#).unwrap_err();
        assert!(wrong.starts_with("at /amount: ") && wrong.contains("integer"), "{wrong}");
        assert!(c.check(b"{").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn a_registered_text_that_is_not_a_json_schema_is_refused_with_why() {
        assert!(JsonContract::parse("{").err().unwrap().contains("not JSON"));
        let e = JsonContract::parse(r#"{"type":"no-such-type"}"#).err().unwrap();
        assert!(e.contains("not a valid JSON Schema"), "{e}");
    }
}
