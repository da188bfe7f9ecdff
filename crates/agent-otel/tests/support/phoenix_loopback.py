"""Starts `phoenix serve` with its OTLP/gRPC port on 127.0.0.1 instead of every interface.

Phoenix binds gRPC to [::] with no setting to change it, and tests must never open a port
beyond this machine; its HTTP server already follows PHOENIX_HOST.
"""

import sys

import grpc.aio

_server = grpc.aio.server


def _loopback_server(*args, **kwargs):
    server = _server(*args, **kwargs)
    add_insecure = server.add_insecure_port
    add_secure = server.add_secure_port
    server.add_insecure_port = lambda address: add_insecure(address.replace("[::]", "127.0.0.1"))
    server.add_secure_port = lambda address, credentials: add_secure(
        address.replace("[::]", "127.0.0.1"), credentials
    )
    return server


grpc.aio.server = _loopback_server

from phoenix.server.main import main  # noqa: E402  (after the patch, on purpose)

sys.argv = ["phoenix", "serve"]
sys.exit(main())
