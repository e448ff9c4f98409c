"""The simulated GPU nodes: kubelets, device plugins and node-side GPU behaviour, through
the real API server only (see ``agent``)."""
