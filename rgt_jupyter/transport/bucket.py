"""Checkpoints in an S3-compatible bucket (AWS S3, Cloudflare R2, Backblaze B2, GCS through its
S3 API, MinIO): the tier a checkpoint outlives every machine in.

A job lineage's checkpoints live under ``s3://BUCKET/PREFIX/NAME/LINEAGE/``::

    ckpt-0000000010.pt          the checkpoint's bytes, uploaded whole
    ckpt-0000000010.pt.sha256   its sha256 record, uploaded only once the object is there and
                                its size and sha256 (object metadata) are checked

The job side (``rgt_jupyter.job``) writes both; this side lists, checks and downloads. A
checkpoint in the bucket counts only when its record is there and the object matches it (size
and recorded sha256 here; every byte when it is downloaded): an upload cut short by a
preemption leaves an object without a record, or none, never a newer checkpoint that is trusted.

Credentials are named, never stored: ``credentials`` is a profile of the AWS shared credentials
and config files (``~/.aws/credentials``, or ``AWS_SHARED_CREDENTIALS_FILE``); empty takes
boto3's default chain. A job gets them as secrets (a 0600 file, removed when it ends). boto3 is
imported only when a bucket is used (``pip install 'rgt-jupyter[s3]'``).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError

#: The secrets a job gets to reach its bucket (values never in argv, env or logs).
SECRET_NAMES = ("RGT_BUCKET_KEY_ID", "RGT_BUCKET_SECRET_KEY", "RGT_BUCKET_TOKEN")

_CKPT_RE = re.compile(r"^ckpt-(\d+)\.(pt|json)$")


@dataclass(frozen=True)
class BucketConfig:
    """Where a profile (or ``--bucket``) keeps checkpoints, and how to reach it."""

    url: str
    endpoint: str = ""
    credentials: str = ""
    region: str = ""

    @property
    def bucket(self) -> str:
        """The bucket's name."""
        return self.url[len("s3://") :].split("/", 1)[0]

    @property
    def prefix(self) -> str:
        """The key prefix under the bucket (no slash at either end)."""
        rest = self.url[len("s3://") :].split("/", 1)
        return rest[1].strip("/") if len(rest) > 1 else ""

    def lineage_url(self, name: str, lineage: str) -> str:
        """The URL of one job lineage's checkpoints (every resume of it, on any machine)."""
        parts = [p for p in (self.prefix, name, lineage) if p]
        return f"s3://{self.bucket}/{'/'.join(parts)}"

    def as_dict(self) -> dict[str, str]:
        """The fields a job spec records (no secret among them)."""
        return {
            "url": self.url,
            "endpoint": self.endpoint,
            "credentials": self.credentials,
            "region": self.region,
        }


def config_of(table: dict[str, Any], url: str | None = None) -> BucketConfig | None:
    """The bucket of a profile's ``[bucket]`` table, ``url`` (``--bucket``) replacing its URL;
    None when neither names one."""
    chosen = (url or table.get("url") or "").strip()
    if not chosen:
        return None
    if not re.fullmatch(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/[^\s]*)?", chosen):
        raise UsageError(f"{chosen!r} is not a bucket URL: use s3://BUCKET/PREFIX")
    return BucketConfig(
        url=chosen.rstrip("/"),
        endpoint=str(table.get("endpoint", "")),
        credentials=str(table.get("credentials", "")),
        region=str(table.get("region", "")),
    )


def parse(url: str) -> tuple[str, str]:
    """``s3://BUCKET/KEY/PREFIX`` as (bucket, prefix)."""
    cfg = BucketConfig(url)
    return cfg.bucket, cfg.prefix


def _boto3() -> Any:
    try:
        import boto3  # deferred: an optional extra, needed only where a bucket is used
    except ImportError as exc:
        raise UsageError(
            "checkpoints in a bucket need boto3 in this kernel: pip install 'rgt-jupyter[s3]'"
        ) from exc
    return boto3


def _session(cfg: BucketConfig) -> Any:
    boto3 = _boto3()
    try:
        return boto3.Session(profile_name=cfg.credentials or None)
    except Exception as exc:  # noqa: BLE001 - botocore's ProfileNotFound and kin
        raise UsageError(
            f"the bucket credentials {cfg.credentials!r} are not in the AWS credentials or "
            f"config files ({exc}): add a [{cfg.credentials}] profile there (or set "
            "AWS_SHARED_CREDENTIALS_FILE), or name another in the profile's [bucket] credentials"
        ) from exc


def client(cfg: BucketConfig) -> Any:
    """A boto3 S3 client for the bucket (its endpoint, region and named credentials)."""
    session = _session(cfg)
    kw: dict[str, Any] = {"region_name": cfg.region or session.region_name or "us-east-1"}
    if cfg.endpoint:
        kw["endpoint_url"] = cfg.endpoint
    return session.client("s3", **kw)


def credentials(cfg: BucketConfig) -> dict[str, str]:
    """The named credentials as the job's secrets (:data:`SECRET_NAMES`)."""
    found = _session(cfg).get_credentials()
    if found is None:
        raise UsageError(
            f"no credentials for the bucket {cfg.url}: name a profile of the AWS credentials "
            "file in the profile's [bucket] credentials (or set AWS_SHARED_CREDENTIALS_FILE)"
        )
    frozen = found.get_frozen_credentials()
    values = {SECRET_NAMES[0]: frozen.access_key, SECRET_NAMES[1]: frozen.secret_key}
    if frozen.token:
        values[SECRET_NAMES[2]] = frozen.token
    return values


def _refusal(cfg: BucketConfig, exc: Exception) -> str:
    code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidClientTokenId", "403"):
        return (
            f"the bucket {cfg.url} refuses the credentials {cfg.credentials or '(default)'!r} "
            f"({code}): fix them in the AWS credentials file, then launch again"
        )
    if code in ("NoSuchBucket", "404"):
        return f"there is no bucket {cfg.bucket!r} at {cfg.endpoint or 'AWS'}: create it first"
    if code == "AccessDenied":
        return (
            f"the credentials {cfg.credentials or '(default)'!r} may not list {cfg.url} "
            "(AccessDenied): grant s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject"
        )
    return f"the bucket {cfg.url} could not be reached ({exc})"


def check(cfg: BucketConfig) -> None:
    """Refuse, with what to do, a bucket these credentials cannot list (wrong keys, no such
    bucket, endpoint down); writes are checked by the job at each upload."""
    try:
        client(cfg).list_objects_v2(Bucket=cfg.bucket, Prefix=cfg.prefix, MaxKeys=1)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - botocore's errors: each said as what to do
        raise UsageError(_refusal(cfg, exc)) from exc


@dataclass(frozen=True)
class BucketCheckpoint:
    """A checkpoint in the bucket whose record is there and whose object matches it."""

    step: int
    name: str
    key: str
    sha256: str
    size: int


def complete(cfg: BucketConfig, lineage_url: str) -> list[BucketCheckpoint]:
    """The lineage's complete checkpoints in the bucket, oldest first: a record, and an object
    of the size and sha256 (its metadata) the upload stated. Objects without a record (an
    upload cut short) are left out."""
    s3 = client(cfg)
    bucket, prefix = parse(lineage_url)
    keys: dict[str, int] = {}
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    for page in pages:
        for obj in page.get("Contents", []):
            keys[obj["Key"]] = int(obj["Size"])
    found = []
    for key, size in keys.items():
        name = key.rsplit("/", 1)[-1]
        m = _CKPT_RE.match(name)
        if not m or key + ".sha256" not in keys:
            continue
        record = s3.get_object(Bucket=bucket, Key=key + ".sha256")["Body"].read().decode()
        fields = record.split()
        head = s3.head_object(Bucket=bucket, Key=key)
        stated = head.get("Metadata", {}).get("sha256", "")
        if fields and fields[0] == stated and int(head["ContentLength"]) == size:
            found.append(BucketCheckpoint(int(m.group(1)), name, key, fields[0], size))
    return sorted(found, key=lambda c: c.step)


def download(cfg: BucketConfig, ckpt: BucketCheckpoint, dest: Path) -> bool:
    """Download ``ckpt`` to ``dest`` (atomically); False, and nothing left, when its bytes do
    not match its record."""
    s3 = client(cfg)
    bucket, _ = parse(f"s3://{cfg.bucket}")
    tmp = dest.with_name(f".{dest.name}.part")
    s3.download_file(bucket, ckpt.key, str(tmp))
    sha = hashlib.sha256()
    with open(tmp, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    if sha.hexdigest() != ckpt.sha256:
        tmp.unlink()
        return False
    os.replace(tmp, dest)
    return True
