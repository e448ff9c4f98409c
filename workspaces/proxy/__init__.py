"""The workspace proxy (docs/workspaces.md): an ASGI process in front of the portal that
serves ``/workspaces/<id>/…`` to the workspace's owner, HTTP and WebSocket, and hands every
other path to the portal's web process (``WORKSPACE_PROXY_UPSTREAM``), as an ingress would."""
