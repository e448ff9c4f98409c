"""A local stand-in for a Kubernetes cluster with NVIDIA GPU nodes, served over HTTPS (plain
HTTP with ``--insecure-http``).

Run it with ``python -m sandbox --profile default``. The portal reaches it only through
the official ``kubernetes`` client, exactly as it would reach a real API server.
"""
