"""A real S3 API server on 127.0.0.1 for the object-storage tests: moto's server mode
(``moto_server``), with IAM enforced, spoken to by boto3 over HTTP.

The server starts once per test session. Its first six calls (the only ones it takes without
credentials) create two IAM users: ``rw`` may do anything to S3, ``ro`` may only list and read
(a bucket that refuses this job's writes, by a real policy). The tests name them through an AWS
shared credentials file with the profiles ``rgt-rw``, ``rgt-ro`` and ``rgt-bad`` (a key the
server never issued): credentials are named, as a user's profile names them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

#: The calls the server takes before it enforces IAM: two users, their policies, their keys.
_BOOTSTRAP_CALLS = 6


@dataclass
class S3Server:
    """A running moto server and the keys of its two users."""

    endpoint: str
    keys: dict[str, tuple[str, str]]
    process: subprocess.Popen[bytes]

    def client(self, who: str = "rw") -> Any:
        """A boto3 S3 client as user ``who`` (``rw`` or ``ro``)."""
        key, secret = self.keys[who]
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            region_name="us-east-1",
        )

    def credentials_file(self, path: Path) -> Path:
        """An AWS shared credentials file with the profiles ``rgt-rw``, ``rgt-ro``, ``rgt-bad``."""
        lines = []
        for name, (key, secret) in {**self.keys, "bad": ("AKIANOTISSUED00000", "x" * 40)}.items():
            lines += [
                f"[rgt-{name}]",
                f"aws_access_key_id = {key}",
                f"aws_secret_access_key = {secret}",
                "",
            ]
        path.write_text("\n".join(lines))
        path.chmod(0o600)
        return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_s3() -> S3Server:
    """Start ``moto_server`` and create its users; fail loudly when it cannot start."""
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which(
        "moto_server"
    )
    if exe is None:
        raise RuntimeError("moto_server is not installed: run scripts/setup.sh (moto[server])")
    port = _free_port()
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(_BOOTSTRAP_CALLS)}
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not start on port {port}") from None
            time.sleep(0.1)
    endpoint = f"http://127.0.0.1:{port}"
    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        aws_access_key_id="AKIABOOTSTRAP000000",
        aws_secret_access_key="bootstrap",
        region_name="us-east-1",
    )
    keys = {}
    # ``ro`` is granted every list and read action by wildcard, not by the exact names a server
    # may or may not map a request to (ListBucket, ListObjectsV2, ...): only writes are refused.
    for who, actions in (("rw", ["s3:*"]), ("ro", ["s3:List*", "s3:Get*", "s3:HeadBucket"])):
        iam.create_user(UserName=who)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
        }
        iam.put_user_policy(UserName=who, PolicyName=f"{who}-s3", PolicyDocument=json.dumps(policy))
        made = iam.create_access_key(UserName=who)["AccessKey"]
        keys[who] = (made["AccessKeyId"], made["SecretAccessKey"])
    return S3Server(endpoint, keys, proc)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One S3 API server for the session."""
    server = start_s3()
    yield server
    server.process.terminate()
    server.process.wait(30)


@dataclass
class Bucket:
    """A fresh bucket of the server, and the profile lines that use it."""

    server: S3Server
    name: str

    @property
    def url(self) -> str:
        return f"s3://{self.name}/ckpts"

    def table(self, credentials: str = "rgt-rw", endpoint: str | None = None) -> str:
        """A profile's ``[bucket]`` table for this bucket."""
        return (
            f'\n[bucket]\nurl = "{self.url}"\nendpoint = "{endpoint or self.server.endpoint}"\n'
            f'credentials = "{credentials}"\nregion = "us-east-1"\n'
        )

    def keys(self) -> list[str]:
        """Every key in the bucket."""
        listed = self.server.client().list_objects_v2(Bucket=self.name)
        return sorted(o["Key"] for o in listed.get("Contents", []))


@pytest.fixture
def bucket(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A new bucket, and the credentials file that names the server's users."""
    name = f"rgt-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=name)
    creds = s3_server.credentials_file(tmp_path / "aws_credentials")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws_config_absent"))
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    return Bucket(s3_server, name)
