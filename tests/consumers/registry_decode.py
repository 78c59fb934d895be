"""Decodes schema-registry framed record values the way a Python consumer would, with
confluent-kafka's schema_registry deserializers, for tests/support/registry.rs.

  registry_decode.py avro|json|protobuf CCOMPAT_URL TOPIC WORK_DIR

Reads one JSON object per line on stdin -- {"value": hex|null} -- and prints one JSON object
per line: {"value": <what the deserializer made of it>} (null for a null value), or
{"error": "<why it could not>"} so that a test can show which record failed and why. Bytes are
printed as base64, so the output of a run is deterministic.

  avro      AvroDeserializer(client): the writer schema by the id in the frame
  json      JSONDeserializer(None, schema_registry_client=client): the schema by id, validated
  protobuf  ProtobufDeserializer needs the generated message class up front. The writer schema
            is fetched by id from the registry in its text form, compiled with grpc_tools.protoc
            (WORK_DIR holds the .proto files and descriptor sets) and the class picked by the
            frame's message indexes; the deserializer then reads the framing itself. It is given
            no registry client: with one it asks for `?format=serialized`, which Confluent's
            registry answers with base64 and Apicurio Registry 3.3.3 with the raw descriptor bytes
            in a JSON string, which confluent-kafka cannot base64-decode.

A missing library is an error (exit 3) naming scripts/install-test-deps.sh, never a skip.
"""

import base64
import datetime
import decimal
import json
import os
import sys
import uuid


def missing(what, err):
    print(f"registry_decode.py: {what} is not installed ({err}); run scripts/install-test-deps.sh",
          file=sys.stderr)
    sys.exit(3)


try:
    from confluent_kafka.serialization import MessageField, SerializationContext
    from confluent_kafka.schema_registry import SchemaRegistryClient
except ImportError as err:
    missing("confluent-kafka with its schema_registry extras", err)


def plain(v):
    """What json.dumps cannot print itself, printed deterministically."""
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, (decimal.Decimal, uuid.UUID)):
        return str(v)
    return v


def values():
    for line in sys.stdin:
        if line.strip():
            v = json.loads(line)["value"]
            yield None if v is None else bytes.fromhex(v)


def varint(buf, pos):
    """A zigzag varint, as Confluent frames protobuf message indexes."""
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def frame(data):
    """(schema id, message indexes) of a protobuf record value in Confluent's framing."""
    if len(data) < 5 or data[0] != 0:
        raise ValueError(f"not Confluent framing: magic byte {data[:1].hex() or 'missing'}")
    schema_id = int.from_bytes(data[1:5], "big")
    count, pos = varint(data, 5)
    indexes = []
    for _ in range(count):
        i, pos = varint(data, pos)
        indexes.append(i)
    return schema_id, indexes or [0]


class ProtoClasses:
    """Message classes of the registry's protobuf schemas, compiled once per schema id."""

    def __init__(self, client, work_dir):
        try:
            from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
            from grpc_tools import protoc
        except ImportError as err:
            missing("protobuf and grpcio-tools", err)
        self.client, self.work_dir = client, work_dir
        self.pb2, self.pools, self.factory, self.protoc = (
            descriptor_pb2, descriptor_pool, message_factory, protoc)
        self.files = {}

    def write(self, root, name, schema, seen):
        """Writes a schema and, recursively, the schemas it references under their import names."""
        path = os.path.join(root, name)
        if path in seen:
            return
        seen.add(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(schema.schema_str)
        for ref in schema.references or []:
            registered = self.client.get_version(ref.subject, ref.version)
            self.write(root, ref.name, registered.schema, seen)

    def file(self, schema_id):
        if schema_id not in self.files:
            schema = self.client.get_schema(schema_id)
            root = os.path.join(self.work_dir, f"schema-{schema_id}")
            self.write(root, "schema.proto", schema, set())
            out = os.path.join(root, "descriptors.pb")
            # The well-known types (google/protobuf/*.proto) ship inside grpc_tools.
            include = os.path.join(os.path.dirname(self.protoc.__file__), "_proto")
            rc = self.protoc.main(["protoc", f"-I{root}", f"-I{include}", "--include_imports",
                                   f"--descriptor_set_out={out}", "schema.proto"])
            if rc != 0:
                raise ValueError(f"protoc could not compile schema {schema_id} (files in {root})")
            fds = self.pb2.FileDescriptorSet()
            with open(out, "rb") as f:
                fds.ParseFromString(f.read())
            pool = self.pools.DescriptorPool()
            for fd in fds.file:  # dependencies come first in a descriptor set
                pool.Add(fd)
            # Message indexes count in declaration order, which the FileDescriptorProto keeps.
            names = [m.name for m in fds.file[-1].message_type]
            self.files[schema_id] = (pool.FindFileByName("schema.proto"), names)
        return self.files[schema_id]

    def message_class(self, data):
        schema_id, indexes = frame(data)
        file, names = self.file(schema_id)
        desc = file.message_types_by_name[names[indexes[0]]]
        for i in indexes[1:]:
            desc = desc.nested_types[i]
        return self.factory.GetMessageClass(desc)


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("avro", "json", "protobuf"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    kind, url, topic, work_dir = sys.argv[1:]
    # Its requests have no timeout unless given one: a paused registry would hang the script.
    client = SchemaRegistryClient({"url": url, "timeout": 20})
    ctx = SerializationContext(topic, MessageField.VALUE)
    if kind == "avro":
        try:
            from confluent_kafka.schema_registry.avro import AvroDeserializer
        except ImportError as err:
            missing("fastavro (confluent-kafka's Avro serde)", err)
        deserializer = AvroDeserializer(client)
        decode = lambda data: plain(deserializer(data, ctx))  # noqa: E731
    elif kind == "json":
        try:
            from confluent_kafka.schema_registry.json_schema import JSONDeserializer
        except ImportError as err:
            missing("jsonschema (confluent-kafka's JSON Schema serde)", err)
        deserializer = JSONDeserializer(None, schema_registry_client=client)
        decode = lambda data: plain(deserializer(data, ctx))  # noqa: E731
    else:
        try:
            from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
            from google.protobuf import json_format
        except ImportError as err:
            missing("protobuf (confluent-kafka's Protobuf serde)", err)
        classes = ProtoClasses(client, work_dir)
        deserializers = {}

        def decode(data):
            cls = classes.message_class(data)
            if cls not in deserializers:
                deserializers[cls] = ProtobufDeserializer(cls, {"use.deprecated.format": False})
            msg = deserializers[cls](data, ctx)
            return json_format.MessageToDict(msg, preserving_proto_field_name=True)

    for data in values():
        try:
            out = {"value": None if data is None else decode(data)}
        except Exception as err:  # one record's failure is the test's to judge
            out = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
