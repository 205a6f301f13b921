"""Regenerate or check the committed Python stubs of the kubelet protos.

The stubs are committed so that installing the project needs no protoc; this
script keeps them honest. ``python -m api.generate`` rewrites them from the
``.proto`` files; ``--check`` generates into a temporary directory, compares,
and names every file that differs, so CI fails when someone edits a proto or a
stub without regenerating.

Output depends on the grpcio-tools version, so the check compares against the
installed grpcio-tools and, when the committed stubs were made by another
version, says so: the fix is then to install the pinned version, not to
regenerate.

Some protos are the kubelet's own files, copied byte for byte from the Go
module named in :data:`VERBATIM`; ``--check`` also fails when one of them no
longer has the recorded digest, so a hand edit cannot pass as upstream.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
API_DIR = "api"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")

#: proto path -> (upstream file, sha256 of its bytes): protos copied unchanged from the kubelet's
#: Go module k8s.io/kubelet v0.36.3 (the version Kubernetes v1.36.3 vendors); update the digest
#: together with the file when moving to a newer module.
KUBELET_MODULE = "k8s.io/kubelet@v0.36.3"
VERBATIM: dict[str, tuple[str, str]] = {
    "api/pluginregistration/v1/api.proto": (
        "pkg/apis/pluginregistration/v1/api.proto",
        "7a67a0000a1a167c155286834bc9ccb489f8bcdb394e006daba270189c272afa",
    ),
    "api/dra/v1/api.proto": (
        "pkg/apis/dra/v1/api.proto",
        "b3066ad7f6abcfd0003c47b06ceb801d76997d78d6be505597478d3905b9cc57",
    ),
    "api/drahealth/v1alpha1/api.proto": (
        "pkg/apis/dra-health/v1alpha1/api.proto",
        "75f8c523ec546ceb83bd63f3b7a38c23d979494e7015db12d146e2f39dd4528e",
    ),
}

_GRPC_VERSION_RE = re.compile(r"^GRPC_GENERATED_VERSION = '([^']+)'$", re.MULTILINE)


class GenerateError(Exception):
    """A problem the user fixes by installing or editing something."""


def proto_files(root: Path) -> list[str]:
    """Proto paths relative to ``root``; relative so imports in the stubs are package-qualified."""
    return sorted(p.relative_to(root).as_posix() for p in (root / API_DIR).rglob("*.proto"))


def generated_files(root: Path) -> dict[str, bytes]:
    """Every generated stub under ``root/api``, keyed by its path relative to ``root``."""
    found: dict[str, bytes] = {}
    for path in (root / API_DIR).rglob("*"):
        if path.is_file() and path.name.endswith(GENERATED_SUFFIXES):
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


def installed_grpcio_tools() -> str:
    """Version of grpcio-tools that would generate; its output is what we compare to."""
    try:
        from grpc_tools import grpc_version
    except ImportError as exc:
        raise GenerateError(
            "grpcio-tools is not installed; install it with: pip install 'grpcio-tools==<pinned version>'"
        ) from exc
    return grpc_version.VERSION


def generate(root: Path, out_dir: Path) -> dict[str, bytes]:
    """Run protoc (from grpcio-tools) over every proto under ``root/api`` into ``out_dir``."""
    installed_grpcio_tools()
    from grpc_tools import protoc

    protos = proto_files(root)
    if not protos:
        raise GenerateError(f"no .proto files under {root / API_DIR}")
    args = [
        "grpc_tools.protoc",
        f"-I{root}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(str(root / p) for p in protos),
    ]
    if protoc.main(args) != 0:
        raise GenerateError("protoc failed on the .proto files under api/ (see the message above)")
    return generated_files(out_dir)


def compare(committed: dict[str, bytes], fresh: dict[str, bytes]) -> dict[str, str]:
    """Why each out-of-date file is out of date, keyed by its path."""
    problems = {}
    for name in sorted(committed.keys() | fresh.keys()):
        if name not in committed:
            problems[name] = "missing (not committed)"
        elif name not in fresh:
            problems[name] = "stale (no .proto produces it any more)"
        elif committed[name] != fresh[name]:
            problems[name] = "differs from a fresh generation"
    return problems


def committed_grpcio_tools(committed: dict[str, bytes]) -> set[str]:
    """grpcio-tools versions recorded in the committed ``*_pb2_grpc.py`` files."""
    versions = set()
    for name, content in committed.items():
        if name.endswith("_pb2_grpc.py"):
            versions.update(_GRPC_VERSION_RE.findall(content.decode()))
    return versions


def edited_upstream_protos(root: Path) -> list[str]:
    """Why each verbatim kubelet proto under ``root`` is not the recorded upstream file."""
    problems = []
    for name, (upstream, digest) in VERBATIM.items():
        path = root / name
        if not path.is_file():
            problems.append(f"{name}: missing; copy {KUBELET_MODULE}/{upstream} there")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            problems.append(
                f"{name}: differs from {KUBELET_MODULE}/{upstream}; copy it unchanged "
                "(or record a newer module's file and digest in api/generate.py)"
            )
    return problems


def check(root: Path) -> tuple[list[str], str]:
    """Out-of-date stubs and edited upstream protos (empty when all is in order), and how to fix them."""
    committed = generated_files(root)
    with tempfile.TemporaryDirectory(prefix="cmk-api-generate-") as tmp:
        differences = compare(committed, generate(root, Path(tmp)))
    problems = [f"{name}: {why}" for name, why in differences.items()] + edited_upstream_protos(root)
    installed = installed_grpcio_tools()
    other = committed_grpcio_tools(committed) - {installed}
    if other:
        return problems, (
            f"the committed stubs were generated with grpcio-tools {', '.join(sorted(other))} "
            f"but {installed} is installed; install that version, then check again"
        )
    if not differences:
        return problems, "each line above says which upstream file to copy"
    return problems, "run `python -m api.generate` and commit the result"


def write(root: Path) -> list[str]:
    """Bring the committed stubs in line with a fresh generation; returns what changed."""
    committed = generated_files(root)
    with tempfile.TemporaryDirectory(prefix="cmk-api-generate-") as tmp:
        fresh = generate(root, Path(tmp))
    for name, content in fresh.items():
        if committed.get(name) != content:
            (root / name).write_bytes(content)
    for name in committed.keys() - fresh.keys():
        (root / name).unlink()
    return list(compare(committed, fresh))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api.generate", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="do not write; exit 1 and name the stubs that are out of date"
    )
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems, fix = check(REPO_ROOT)
            for line in problems:
                print(line, file=sys.stderr)
            if problems:
                print(fix, file=sys.stderr)
                return 1
            return 0
        for name in write(REPO_ROOT):
            print(f"{name} updated")
        return 0
    except GenerateError as exc:
        print(f"api.generate: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
