package io.confluent.kafka.schemaregistry.json;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.confluent.kafka.schemaregistry.json.jackson.Jackson;
import java.io.IOException;
import java.util.Objects;

/**
 * What JsonSchemaData needs of Confluent's JsonSchema (json-schema-provider 7.0.16, not on Maven
 * Central): the registered text is the everit schema's toString read into a Jackson tree and
 * written back (its constructor and canonicalString()).
 */
public class JsonSchema {
  private static final ObjectMapper MAPPER = Jackson.newObjectMapper();
  private final org.everit.json.schema.Schema schemaObj;
  private final JsonNode jsonNode;

  public JsonSchema(org.everit.json.schema.Schema schemaObj) {
    this.schemaObj = schemaObj;
    try {
      this.jsonNode = MAPPER.readTree(schemaObj.toString());
    } catch (IOException e) {
      throw new IllegalArgumentException("Invalid JSON " + schemaObj, e);
    }
  }

  public org.everit.json.schema.Schema rawSchema() {
    return schemaObj;
  }

  public Integer version() {
    return null;
  }

  public String canonicalString() {
    try {
      return MAPPER.writeValueAsString(jsonNode);
    } catch (IOException e) {
      throw new IllegalArgumentException("Invalid JSON", e);
    }
  }

  @Override public boolean equals(Object o) {
    return o instanceof JsonSchema && Objects.equals(jsonNode, ((JsonSchema) o).jsonNode);
  }

  @Override public int hashCode() {
    return Objects.hashCode(jsonNode);
  }
}
