"""Telemetry: Prometheus metrics and klog-style logs."""
