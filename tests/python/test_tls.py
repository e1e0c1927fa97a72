"""kvtier.Client over TLS and mutual TLS (tls_* options) against a real kvtierd started with
--tls-cert / --tls-key / --tls-client-ca / --tls-require-client-cert; certificates are made
here with the openssl command."""

import subprocess

import pytest

import blocks
import kvtier

_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(d, name):
    _openssl("req", "-x509", *_KEY, "-days", "2", "-subj", "/CN=%s test CA" % name,
             "-keyout", str(d / (name + "-ca.key")), "-out", str(d / (name + "-ca.pem")),
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign")
    return d / (name + "-ca.pem"), d / (name + "-ca.key")


def _issue(d, ca, leaf, sans):
    ext = d / (leaf + ".ext")
    ext.write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n"
                   "subjectAltName=%s\n" % sans)
    _openssl("req", *_KEY, "-subj", "/CN=" + leaf, "-keyout", str(d / (leaf + ".key")),
             "-out", str(d / (leaf + ".csr")))
    _openssl("x509", "-req", "-days", "2", "-in", str(d / (leaf + ".csr")), "-CA", str(ca[0]),
             "-CAkey", str(ca[1]), "-CAcreateserial", "-extfile", str(ext),
             "-out", str(d / (leaf + ".pem")))
    return str(d / (leaf + ".pem")), str(d / (leaf + ".key"))


def test_mutual_tls_round_trip_and_refusals(start_server, tmp_path):
    good, other = _ca(tmp_path, "good"), _ca(tmp_path, "other")
    cert, key = _issue(tmp_path, good, "server", "IP:127.0.0.1,DNS:localhost")
    client_cert, client_key = _issue(tmp_path, good, "client", "DNS:client")
    server = start_server("--tls-cert", cert, "--tls-key", key, "--tls-client-ca", str(good[0]),
                          "--tls-require-client-cert")
    lay = blocks.layout()
    spec = kvtier.make_namespace("tls", lay, codec="fp16")
    tls = dict(tls_ca_file=str(good[0]), tls_cert_file=client_cert, tls_key_file=client_key,
               shared_memory=False, connect_timeout=3.0)
    with kvtier.Client(server.address, namespace=spec, **tls) as c:
        keys, puts, raw = blocks.sequence(spec.name, lay, 3, seed=3)
        assert c.put_blocks(spec.name, puts, format=kvtier.RAW).blocks_stored == 3
        got = c.get_blocks(spec.name, keys, format=kvtier.RAW)
        assert bytes(got[1].data) == raw[1].tobytes()
    refused = (kvtier.UnavailableError, kvtier.DeadlineExceededError)
    with pytest.raises(refused):  # plaintext to a TLS port
        kvtier.Client(server.address, connect_timeout=2.0, max_attempts=1)
    with pytest.raises(refused):  # trusts another CA
        kvtier.Client(server.address, max_attempts=1, **dict(tls, tls_ca_file=str(other[0])))
    with pytest.raises(refused):  # no client certificate
        kvtier.Client(server.address, max_attempts=1, tls_ca_file=str(good[0]),
                      connect_timeout=2.0)
    with pytest.raises(kvtier.InvalidArgumentError):
        kvtier.Client(server.address, tls_cert_file=client_cert)


def test_cluster_members_are_checked_against_their_dns_node_id():
    from kvtier.cluster import _tls_name
    assert _tls_name("10.0.0.7:50051", "10.0.0.7:50051") == ""
    assert _tls_name("kvtier-1.kvtier-peers.kvtier.svc.cluster.local:50051",
                     "10.0.0.7:50051") == "kvtier-1.kvtier-peers.kvtier.svc.cluster.local"
    assert _tls_name("10.0.0.8:50051", "10.0.0.7:50051") == ""
    assert _tls_name("[::1]:50051", "127.0.0.1:50051") == ""
