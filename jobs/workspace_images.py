"""The workspace images a fresh portal offers (admins edit them, or add their own, in the
admin): the migration that creates the table and ``seed_demo`` both write these."""

from __future__ import annotations

from typing import Any

DEFAULT_IMAGES: list[dict[str, Any]] = [
    {
        "name": "jupyter-pytorch",
        "title": "JupyterLab with PyTorch (CUDA 12)",
        "description": "The Jupyter Docker Stacks' pytorch-notebook: PyTorch, CUDA 12.",
        "flavor": "jupyter",
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-24",
        "command": ["start-notebook.py"],
        "port": 8888,
        "home_path": "/home/jovyan",
    },
    {
        "name": "jupyter-tensorflow",
        "title": "JupyterLab with TensorFlow (CUDA)",
        "description": "The Jupyter Docker Stacks' tensorflow-notebook, CUDA build.",
        "flavor": "jupyter",
        "image": "quay.io/jupyter/tensorflow-notebook:cuda-2026-11-24",
        "command": ["start-notebook.py"],
        "port": 8888,
        "home_path": "/home/jovyan",
    },
    {
        "name": "code-server",
        "title": "VS Code in the browser (code-server)",
        "description": "Coder's code-server: VS Code, its terminal and extensions.",
        "flavor": "code-server",
        "image": "docker.io/codercom/code-server:4.106.3",
        "command": ["/usr/bin/entrypoint.sh"],
        "port": 8080,
        "home_path": "/home/coder",
    },
]
