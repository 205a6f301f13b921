"""The hook's parsers under libFuzzer with ASan and UBSan, for a bounded time, from the committed corpus (issue 20).

``tests/pinner/fuzz/fuzz_hook.c`` compiles the static pinner's own units in
and feeds each parser the hook reads untrusted bytes with: config.json, the
OCI state, cpu lists, ``/proc/PID/cgroup``, mountinfo and the infra record.
The committed corpus runs first, whole (a regression test of every input ever
kept), then the fuzzer mutates it for :data:`SECONDS` in a scratch copy. Any
sanitizer report, crash, timeout or out-of-memory fails the test with the
reproducer's path.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pinner.build import NATIVE

HARNESS = Path(__file__).with_name("fuzz") / "fuzz_hook.c"
CORPUS = HARNESS.with_name("corpus")
SECONDS = 20
FLAGS = ["-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=undefined"]


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("clang") is None:
        pytest.fail("clang is not installed (apt-get install clang libclang-rt-14-dev): the hook's fuzzer needs it")
    output = tmp_path_factory.mktemp("fuzz") / "fuzz_hook"
    built = subprocess.run(["clang", *FLAGS, "-I", str(NATIVE), "-o", str(output), str(HARNESS)],
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    return output


def fuzz(binary: Path, work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), "-detect_leaks=0", "-timeout=5", "-rss_limit_mb=2048",
                           f"-artifact_prefix={work}/", *args], cwd=work, capture_output=True, text=True,
                          timeout=SECONDS * 6, check=False)


def test_the_committed_corpus_runs_clean(fuzzer: Path, tmp_path: Path) -> None:
    inputs = sorted(CORPUS.iterdir())
    assert len(inputs) >= 6  # a seed for each parser at least
    result = fuzz(fuzzer, tmp_path, *map(str, inputs))
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_hook_parsers_survive_the_fuzzer_for_a_bounded_time(fuzzer: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(CORPUS, corpus)
    result = fuzz(fuzzer, tmp_path, f"-max_total_time={SECONDS}", "-max_len=4096", str(corpus))
    found = [p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "leak-", "timeout-", "oom-"))]
    assert result.returncode == 0 and not found, f"{found}: {result.stderr[-3000:]}"
    print(result.stderr.strip().splitlines()[-1])  # "Done N runs in S second(s)"
