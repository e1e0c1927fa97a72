"""pytest fixtures for the Python client: real kvtierd processes on 127.0.0.1 port 0.

The build tree is $KVTIER_BINARY_DIR (else <repo>/build); the package is imported from
<build>/python (put on sys.path here, so no .pth file or install is needed).
kvtierd's contract (service/main.cc): with --port 0 it prints exactly one line
`kvtierd listening on HOST:PORT` once it serves.
"""

import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KVTIER_BINARY_DIR") or os.path.join(REPO, "build")
sys.path.insert(0, os.path.join(BUILD, "python"))
sys.path.insert(0, os.path.join(REPO, "examples", "python"))

KVTIERD = os.environ.get("KVTIER_KVTIERD") or os.path.join(BUILD, "service", "kvtierd")
KVTIER_CLI = os.path.join(BUILD, "client", "cli", "kvtier")
GOLDEN = os.path.join(REPO, "tests", "data", "golden_vectors.txt")
READY = "kvtierd listening on "


class Server:
    """One kvtierd child process. stop() / kill() end it; restart() starts it again on
    the same port and data dir."""

    def __init__(self, data_dir, args=(), config=None):
        self.data_dir = data_dir
        self.args = list(args)
        self.config = config
        self.proc = None
        self.address = ""
        self.port = 0

    def start(self, port=0, timeout=20.0):
        if self.config is not None:
            cmd = [KVTIERD, "--config", self.config]
        else:
            cmd = [KVTIERD, "--port", str(port), "--data-dir", self.data_dir] + self.args
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("kvtierd exited before it was ready: %s" % cmd)
            if line.startswith(READY):
                self.address = line[len(READY):].strip()
                self.port = int(self.address.rsplit(":", 1)[1])
                return self
        raise RuntimeError("kvtierd did not print its ready line")

    @property
    def socket_path(self):
        return os.path.join(self.data_dir, "kvtierd.sock")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        self.proc = None

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self):
        port = self.port
        self.stop()
        return self.start(port)


@pytest.fixture
def start_server(tmp_path):
    """Factory: start_server(*extra_args, config=None) -> a started Server."""
    servers = []

    def start(*args, config=None, name=None):
        d = tmp_path / (name or ("node%d" % len(servers)))
        d.mkdir(exist_ok=True)
        s = Server(str(d), args, config)
        servers.append(s)
        return s.start()

    yield start
    for s in servers:
        s.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One kvtierd shared by a test module."""
    s = Server(str(tmp_path_factory.mktemp("kvtierd")))
    s.start()
    yield s
    s.kill()
