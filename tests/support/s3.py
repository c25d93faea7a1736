"""An S3-compatible server on 127.0.0.1 for tests: moto's server mode, in this process.

pyarrow's ``S3FileSystem`` talks to it over HTTP like to any S3 endpoint, so a journal at
:meth:`S3Server.uri` is an ``s3://`` journal end to end (Spark's workers, other processes
included: they reach it on its port). The credentials are in the URI's userinfo, as a user would
pass them, so tests can also check that they never show.

Example::

    with S3Server() as s3:
        journal = aiospark.Journal(s3.uri("j1"))      # s3://AKIA...:SECRET@bucket/j1?endpoint_override=...
"""
from __future__ import annotations

import logging
import os
import uuid

from .servers import HOST, free_port

__all__ = ["ACCESS_KEY", "SECRET_KEY", "S3Server"]

ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
#: a secret no message may show (tests look for it in errors and logs)
SECRET_KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


class S3Server:
    """moto's ``ThreadedMotoServer`` on a free port of 127.0.0.1, with one bucket."""

    def __init__(self, bucket: str = "journals"):
        self.bucket = bucket
        self.port = free_port()
        self._server = None

    def start(self) -> S3Server:
        import pyarrow.fs as pafs
        from moto.server import ThreadedMotoServer

        os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")  # no metadata lookup for a region
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
        self._server = ThreadedMotoServer(ip_address=HOST, port=self.port, verbose=False)
        self._server.start()
        pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, endpoint_override=self.endpoint,
                          scheme="http", region="us-east-1", allow_bucket_creation=True).create_dir(self.bucket)
        return self

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    def uri(self, name: str | None = None, *, endpoint: str | None = None) -> str:
        """An ``s3://`` location in the bucket (a new one per call unless ``name`` is given)."""
        name = name or f"j-{uuid.uuid4().hex[:8]}"
        return (f"s3://{ACCESS_KEY}:{SECRET_KEY}@{self.bucket}/{name}"
                f"?endpoint_override={endpoint or self.endpoint}&scheme=http&region=us-east-1")

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(access_key=ACCESS_KEY, secret_key=SECRET_KEY, endpoint_override=self.endpoint,
                                 scheme="http", region="us-east-1")

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
