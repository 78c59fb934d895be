"""Decodes Avro record values as Apicurio's deserializer reads them, for tests/support/registry.rs:
the schema id from the frame or the headers (by the id handler it was written with), the writer
schema fetched by that id from Apicurio's own API, and the body read under it with fastavro.
An implementation that shares nothing with walrelay.

  apicurio_decode.py API_URL 4-byte|8-byte|headers contentId|globalId

API_URL is Apicurio's `.../apis/registry/v2`. Reads one JSON object per line on stdin --
{"value": hex, "headers": {name: hex}} -- and prints one per line: {"value": <decoded>,
"id": <the schema id read>} or {"error": "<why not>"}.

A missing library is an error (exit 3) naming scripts/install-test-deps.sh, never a skip.
"""

import io
import json
import sys
import urllib.request

try:
    import fastavro
except ImportError as err:
    print(f"apicurio_decode.py: fastavro is not installed ({err}); run scripts/install-test-deps.sh",
          file=sys.stderr)
    sys.exit(3)

HEADER = {"globalId": "apicurio.value.globalId", "contentId": "apicurio.value.contentId"}


def schema_id(value, headers, handler, use_id):
    """(id, body) as Apicurio's `DefaultHeadersHandler` or id handler reads them."""
    if handler == "headers":
        raw = headers.get(HEADER[use_id])
        if raw is None:
            raise ValueError(f"no {HEADER[use_id]} header (headers: {sorted(headers)})")
        if len(raw) != 8:
            raise ValueError(f"{HEADER[use_id]} holds {len(raw)} bytes, not a long's 8")
        if headers.get("apicurio.value.encoding", b"BINARY") != b"BINARY":
            raise ValueError(f"apicurio.value.encoding is {headers['apicurio.value.encoding']!r}")
        return int.from_bytes(raw, "big"), value
    size = 8 if handler == "8-byte" else 4
    if len(value) < 1 + size or value[0] != 0:
        raise ValueError(f"no magic byte 0 and {size}-byte id: {value[:1 + size].hex()}")
    return int.from_bytes(value[1:1 + size], "big"), value[1 + size:]


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in ("4-byte", "8-byte", "headers") \
            or sys.argv[3] not in HEADER:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    api, handler, use_id = sys.argv[1:]
    schemas = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        record = json.loads(line)
        try:
            value = bytes.fromhex(record["value"])
            headers = {k: bytes.fromhex(v) for k, v in record.get("headers", {}).items()}
            sid, body = schema_id(value, headers, handler, use_id)
            if sid not in schemas:
                url = f"{api}/ids/{use_id}s/{sid}"
                with urllib.request.urlopen(url, timeout=20) as answer:
                    schemas[sid] = fastavro.parse_schema(json.loads(answer.read()))
            out = {"value": fastavro.schemaless_reader(io.BytesIO(body), schemas[sid]), "id": sid}
        except Exception as err:  # one record's failure is the test's to judge
            out = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
