"""Writes the Connect schemas run.sh asks Confluent's JsonSchemaData about, one per line in
JsonConverter's form (the key order of JsonConverter.asJsonSchema, which walrelay's
Schema::to_json writes): every distinct value schema Debezium 3.6.3's router produced for the
fixture rows (tests/fixtures/debezium/*.connect.jsonl), then shapes they lack (every type,
optional or not, named, versioned, arrays of arrays, 14 and 20 fields, colliding and non-ASCII
names).

usage: python3 connect_inputs.py FIXTURES_DIR > json_schema_connect.jsonl
"""
import glob
import json
import sys

TYPES = {"float64": "double"}


def from_dump(s):
    """A schema of the *.connect.jsonl dumps ({"field": …, "schema": …} members) in
    JsonConverter's form."""
    out = {"type": TYPES.get(s["type"], s["type"])}
    if "items" in s:
        out["items"] = from_dump(s["items"])
    if "fields" in s:
        out["fields"] = [dict(from_dump(f["schema"]), field=f["field"]) for f in s["fields"]]
    out["optional"] = s["optional"]
    for k in ("name", "version"):
        if s.get(k) is not None:
            out[k] = s[k]
    return out


def p(t, opt=True, name=None, version=None, field=None):
    d = {"type": t, "optional": opt}
    if name:
        d["name"] = name
    if version is not None:
        d["version"] = version
    if field:
        d["field"] = field
    return d


def s(fields, opt=False, name=None, version=None, field=None):
    d = {"type": "struct", "fields": fields, "optional": opt}
    if name:
        d["name"] = name
    if version is not None:
        d["version"] = version
    if field:
        d["field"] = field
    return d


def a(items, opt=True, field=None):
    d = {"type": "array", "items": items, "optional": opt}
    if field:
        d["field"] = field
    return d


def order(d):
    out = {}
    for k in ["type", "items", "fields", "optional", "name", "version", "field"]:
        if k in d:
            v = d[k]
            if k == "items":
                v = order(v)
            if k == "fields":
                v = [order(f) for f in v]
            out[k] = v
    return out


NAMES_14 = ["orderId", "customerId", "status", "total", "currency", "createdAt", "updatedAt",
            "shippingAddress", "billingAddress", "lineItems", "discount", "tax", "notes", "channel"]

SHAPES = [
    p("string", False), p("string"), p("string", True, "io.debezium.data.Json", 1),
    p("bytes"), p("bytes", False), p("int16"), p("int32", False), p("int64"), p("double"),
    p("boolean"), p("boolean", False), p("int64", False, "io.debezium.time.MicroTimestamp", 1),
    s([p("string", field="orderId"), p("int64", field="qty"), p("double", field="price"),
       p("boolean", field="paid"), a(p("string"), field="tags"),
       s([p("string", field="name"), p("string", field="email")], True, "payload.customer",
         field="customer")], False, "payload"),
    s([p("string", field="payload"), p("string", False, "io.debezium.data.Uuid", 1, field="eventId"),
       p("string", field="eventType"),
       p("int64", True, "io.debezium.time.MicroTimestamp", 1, field="createdAt")],
      False, "dbserver1.public.outbox.Order.Value"),
    s([s([p("int64", field="id"),
          a(s([p("string", field="sku"), p("int32", field="n")], True, "payload.lines"),
            field="lines")], True, "payload", field="payload"),
       p("string", field="type")], False, "dbserver1.public.outbox.Order.Value", 3),
    s([p("string", field=chr(ord("a") + i)) for i in range(20)], False, "payload"),
    s([p("string", field=f) for f in NAMES_14], False, "payload"),
    s([p("string", field="Aa"), p("string", field="BB"), p("int64", field="ü-ß"),
       p("string", field="emoji😀"), p("string", field='quote"d')], False, "payload"),
    a(p("int64"), False), a(s([p("string", field="x")], True, "payload"), True),
    s([], False, "payload"), s([p("string", field="x")], True, "payload.opt"),
    a(a(p("double"), True), False),
    s([p("boolean", False, "x.Flag", 2, field="flag"), p("boolean", True, "x.Maybe", field="maybe"),
       p("bytes", False, "x.Blob", 1, field="blob")], True, "payload", 7),
    s([p("int64", field=f"f{i}") for i in range(30)], False, "payload"),
    # tests/schema_registry.rs: an expanded {"n": …} payload with an envelope placement.
    s([s([p("int32", field="n")], True, "payload", field="payload"),
       p("string", False, field="aggType")], False, "dbz.public.outbox.Order.Value"),
]


def main():
    seen = []
    for path in sorted(glob.glob(f"{sys.argv[1]}/*.connect.jsonl")):
        for line in open(path, encoding="utf-8"):
            schema = json.loads(line).get("value_schema")
            if schema:
                text = json.dumps(order(from_dump(schema)), ensure_ascii=False, separators=(",", ":"))
                if text not in seen:
                    seen.append(text)
    for shape in SHAPES:
        text = json.dumps(order(shape), ensure_ascii=False, separators=(",", ":"))
        if text not in seen:
            seen.append(text)
    for text in seen:
        print(text)


if __name__ == "__main__":
    main()
