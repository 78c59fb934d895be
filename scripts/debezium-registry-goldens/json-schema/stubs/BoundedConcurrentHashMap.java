package io.confluent.kafka.schemaregistry.utils;

import java.util.concurrent.ConcurrentHashMap;

/** A cache for JsonSchemaData; unbounded is enough for one run of a few schemas. */
public class BoundedConcurrentHashMap<K, V> extends ConcurrentHashMap<K, V> {
  public BoundedConcurrentHashMap(int capacity) {
    super(capacity);
  }
}
