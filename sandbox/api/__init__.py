"""The Kubernetes REST API surface: discovery, generic CRUD and per-kind behaviour."""
