"""End-to-end tests against a real control plane (see testbed/README.md)."""
