"""The local cluster: the real Kubernetes control plane (built from the components' Go
modules by ``localcluster/``) with simulated NVIDIA GPU nodes.

Run it with ``python -m sandbox --profile default``. The portal reaches it only through
the official ``kubernetes`` client, exactly as it reaches a production cluster.
"""
