"""Monitoring keeps no tables yet: metrics live in Prometheus."""
