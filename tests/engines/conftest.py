"""pytest setup of the engine checks (scripts/test-engines.sh runs them, each engine's file in
that engine's venv): the kvtier package from <build>/python, and kvtierd processes from
tests/python/conftest.py (the same Server class and contract as the client's tests).

Environment: KVTIER_BINARY_DIR (default <repo>/build), KVTIER_ENGINE_MODEL (the converted
SmolLM2 folder, vLLM only), KVTIER_ENGINE_RESULTS (a folder for the measured figures).
"""

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location(
    "kvtier_python_conftest", os.path.join(REPO, "tests", "python", "conftest.py"))
_client_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_client_conftest)  # puts <build>/python on sys.path
Server = _client_conftest.Server
KVTIERD = _client_conftest.KVTIERD
BUILD = _client_conftest.BUILD
sys.path.insert(0, HERE)


@pytest.fixture
def start_server(tmp_path):
    """Factory: start_server(*extra_args) -> a started kvtierd Server (killed at the end)."""
    servers = []

    def start(*args, name=None):
        d = tmp_path / (name or ("kvtierd%d" % len(servers)))
        d.mkdir(exist_ok=True)
        s = Server(str(d), args)
        servers.append(s)
        return s.start()

    yield start
    for s in servers:
        s.kill()


def results_path(name):
    """Where a check writes its measured figures (KVTIER_ENGINE_RESULTS), or None."""
    d = os.environ.get("KVTIER_ENGINE_RESULTS")
    if not d:
        return None
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def run_script(tmp_path, script, args, name, env, timeout=600):
    """Runs tests/engines/<script> `args` --out <tmp_path>/<name>.json in a fresh process
    with `env`, keeps its output in <tmp_path>/<name>.log, asserts it exited 0 and returns
    the JSON it wrote, with `wall_s` and `log` added."""
    out = str(tmp_path / (name + ".json"))
    cmd = [sys.executable, os.path.join(HERE, script)] + list(args) + ["--out", out]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    log = proc.stdout + proc.stderr
    with open(str(tmp_path / (name + ".log")), "w") as f:
        f.write(log)
    assert proc.returncode == 0, log[-5000:]
    with open(out) as f:
        r = json.load(f)
    r["wall_s"], r["log"] = time.monotonic() - t0, log
    return r
