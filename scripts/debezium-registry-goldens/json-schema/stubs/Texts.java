package walrelay.goldens;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.confluent.connect.json.JsonSchemaData;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.json.JsonConverter;

/**
 * Reads Connect schemas, one per line in JsonConverter's form ({"type":"struct","fields":…}), and
 * writes each with the JSON Schema text Confluent's JsonSchemaConverter registers for it:
 * {"connect": <the line>, "json_schema": <the text>}.
 */
public final class Texts {
  public static void main(String[] args) throws Exception {
    ObjectMapper mapper = new ObjectMapper();
    JsonConverter connect = new JsonConverter();
    connect.configure(Map.of("schemas.enable", "true"), false);
    JsonSchemaData data = new JsonSchemaData();
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line; (line = in.readLine()) != null; ) {
      if (line.isBlank()) {
        continue;
      }
      Schema schema = connect.asConnectSchema(mapper.readTree(line));
      ObjectNode out = mapper.createObjectNode();
      out.put("connect", line);
      out.put("json_schema", data.fromConnectSchema(schema).canonicalString());
      System.out.println(mapper.writeValueAsString(out));
    }
  }
}
