//! OTLP/HTTP export of the relay spans (filled in with the exporter).
