#!/usr/bin/env python3
"""One registry golden from the harness's Connect-side capture.

usage: record.py REGISTRY_URL CONNECT_JSONL OUT_JSONL KEY_CONVERTER VALUE_CONVERTER

For each record Debezium converted (or refused), in its order: the event id, the topic, and for
the key and the value the bytes after the Confluent framing's 5 bytes (magic byte 0, schema id),
the schema id (which differs from registry to registry), and the schema the registry holds under
that id with the subjects and versions it is registered as. A string converter's bytes are kept
whole. Headers are the bytes sent.
"""
import base64
import json
import sys
import urllib.request

registry, connect_path, out_path, key_conv, value_conv = sys.argv[1:6]
cache = {}


def get(path):
    with urllib.request.urlopen(registry + path, timeout=10) as r:
        return json.load(r)


def registered(schema_id):
    if schema_id not in cache:
        s = get(f"/schemas/ids/{schema_id}")
        cache[schema_id] = {
            "schema": s["schema"],
            "schema_type": s.get("schemaType", "AVRO"),
            "subjects": get(f"/schemas/ids/{schema_id}/versions"),
        }
    return cache[schema_id]


def side(b64, converter):
    """The fields of one key or value."""
    if b64 is None:
        return {"is_null": True}
    raw = base64.b64decode(b64)
    if converter == "string":
        return {"is_null": False, "bytes_b64": b64}
    assert raw[0] == 0 and len(raw) >= 5, f"not Confluent-framed: {raw[:8]!r}"
    schema_id = int.from_bytes(raw[1:5], "big")
    return {
        "is_null": False,
        "schema_id_nondeterministic": schema_id,
        "after_id_b64": base64.b64encode(raw[5:]).decode("ascii"),
        **registered(schema_id),
    }


def event_id(rec):
    for h in rec.get("headers", []):
        if h["key"] == "id":
            return h["value"]
    return None


with open(connect_path, encoding="utf-8") as f, open(out_path, "w", encoding="utf-8") as out:
    n = 0
    for line in f:
        rec = json.loads(line)
        row = {"seq": rec["seq"], "event_id": event_id(rec), "topic": rec["topic"], "sent": rec["sent"]}
        if rec["sent"]:
            row["key"] = side(rec["sent_key_b64"], key_conv)
            row["value"] = side(rec["sent_value_b64"], value_conv)
            row["headers"] = rec["sent_headers"]
        else:
            row["conversion_error"] = rec["conversion_error"]
        out.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")
        n += 1
print(f"{out_path}: {n} records, {len(cache)} schemas")
