"""Kubernetes Jobs: names, validation, and the manifests of a run, a batch/v1 Job plus a Secret
holding its launch bundle. :mod:`rgt_jupyter.k8s_client` submits, follows and deletes them.

A run is one Job with ``restartPolicy: Never``: a failed or evicted pod is replaced by a new pod
(counted against ``backoffLimit``) that starts the program from the top, and only the checkpoint
on the PersistentVolumeClaim restores its state. The code comes from an image pinned by digest,
so every pod of the Job runs the same bytes; the launch bundle (agent, inputs, secrets) travels
in a Secret mounted read-only, never in the environment or on a command line.

Everything here is plain dicts and checks: ``kubernetes`` is never imported.
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from ...errors import UsageError

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "rgt-jupyter"
JOB_LABEL = "rgt-jupyter/job"
ID_ANNOTATION = "rgt-jupyter/job-id"
NAME_ANNOTATION = "rgt-jupyter/name"
SELECTOR = f"{MANAGED_BY}={MANAGER}"

CONTAINER = "job"
BUNDLE_DIR = "/rgt/bundle"
BUNDLE_KEY = "bundle.zip"
SCRATCH_DIR = "/scratch"

#: Kubernetes refuses a Secret whose data exceeds 1 MiB; the rest is room for metadata.
MAX_BUNDLE_BYTES = 1024 * 1024 - 16 * 1024


_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DIGEST = re.compile(r"[^@\s]+@sha256:[0-9a-f]{64}")
_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?([eE][0-9]+|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")

#: Label keys the Job controller or this module sets; a user label may not take them over.
_RESERVED_KEYS = frozenset({MANAGED_BY, "job-name", "controller-uid"})
_RESERVED_PREFIXES = ("rgt-jupyter/", "batch.kubernetes.io/")


@dataclass(frozen=True, kw_only=True)
class K8sJobSpec:
    """Everything that makes up one run's Job and bundle Secret."""

    job_id: str
    name: str
    image: str
    namespace: str
    python: str = "python3"
    control_dir: str
    pvc: str
    pvc_mount: str = "/checkpoints"
    gpus: int
    cpu: str | None = None
    memory: str | None = None
    backoff_limit: int = 4
    grace_s: int = 30
    scratch_size: str = "20Gi"
    active_deadline_s: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    service_account: str | None = None


# -- names and validation ----------------------------------------------------------------------


def k8s_name(job_id: str) -> str:
    """A DNS-1123 label (lowercase alphanumerics and '-', at most 63) naming the job's Job.

    An id that is already such a label is used as is; any other is lowercased, its other
    characters turned into '-', cut to fit, and given a sha256 suffix of the exact id, so two
    ids that differ only in case or punctuation still get different names.
    """
    if not job_id:
        raise UsageError("A Kubernetes job needs a non-empty job id.")
    lowered = re.sub(r"[^a-z0-9-]", "-", job_id.lower())
    if lowered == job_id and len(job_id) <= 63 and _DNS_LABEL.fullmatch(job_id):
        return job_id
    suffix = hashlib.sha256(job_id.encode()).hexdigest()[:10]
    base = lowered[: 63 - len(suffix) - 1].strip("-")
    return f"{base}-{suffix}" if base else suffix


def _refuse(field_name: str, value: object, rule: str) -> UsageError:
    return UsageError(f"Kubernetes {field_name} {value!r} is invalid: {rule}.")


def check_dns_label(field_name: str, value: str) -> None:
    """Raise ``UsageError`` unless ``value`` is a DNS-1123 label, as Kubernetes requires of a
    namespace or a Job name."""
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise _refuse(
            field_name,
            value,
            "it must be a DNS-1123 label (lowercase letters, digits and '-', starting and "
            "ending with a letter or digit, at most 63 characters)",
        )


def _is_dns_subdomain(value: str) -> bool:
    return len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value) is not None


def _check_dns_subdomain(field_name: str, value: str) -> None:
    if not _is_dns_subdomain(value):
        raise _refuse(
            field_name,
            value,
            "it must be a DNS-1123 name (lowercase letters, digits, '-' and '.', starting and "
            "ending with a letter or digit, at most 253 characters)",
        )


def _check_label(key: str, value: str) -> None:
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (prefix and not _is_dns_subdomain(prefix)):
        raise _refuse(
            "label key", key, "a prefix before '/' must be a DNS-1123 name (like example.com)"
        )
    if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        raise _refuse(
            "label key",
            key,
            "its name must be 1-63 letters, digits, '-', '_' or '.', starting and ending with "
            "a letter or digit",
        )
    if key in _RESERVED_KEYS or key.startswith(_RESERVED_PREFIXES):
        raise _refuse("label key", key, "rgt-jupyter and the Job controller set it themselves")
    if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
        raise _refuse(
            f"label value of {key}",
            value,
            "it must be empty or 1-63 letters, digits, '-', '_' or '.', starting and ending "
            "with a letter or digit",
        )


def _check_line(field_name: str, value: str) -> None:
    if any(c in value for c in "\x00\n\r"):
        raise _refuse(field_name, value, "it must not contain NUL or line breaks")


def _check_path(field_name: str, value: str) -> None:
    if not value.startswith("/"):
        raise _refuse(field_name, value, "it must be an absolute path")
    _check_line(field_name, value)


def _check_quantity(field_name: str, value: str) -> None:
    if not _QUANTITY.fullmatch(value):
        raise _refuse(field_name, value, "it must be a Kubernetes quantity such as 8, 500m or 32Gi")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_count(field_name: str, value: int, rule: str) -> None:
    if not _is_int(value) or value < 0:
        raise _refuse(field_name, value, rule)


def validate(spec: K8sJobSpec) -> None:
    """Raise ``UsageError`` naming the field and the rule for anything Kubernetes would refuse,
    or that would make a relaunched pod differ from the first one."""
    if not _JOB_ID.fullmatch(spec.job_id):
        raise _refuse("job id", spec.job_id, "use letters, digits, '.', '_' and '-'")
    check_dns_label("namespace", spec.namespace)
    _check_dns_subdomain("pvc", spec.pvc)
    if spec.service_account is not None:
        _check_dns_subdomain("service_account", spec.service_account)
    if _CONTROL_CHARS.search(spec.image) or any(c.isspace() for c in spec.image):
        raise _refuse("image", spec.image, "it must not contain whitespace or control characters")
    if not _DIGEST.fullmatch(spec.image):
        raise _refuse(
            "image",
            spec.image,
            "pin it by digest (repo@sha256:<64 hex digits>, from `docker inspect "
            "--format '{{index .RepoDigests 0}}' IMAGE` after pushing): a tag can move, and a "
            "pod the Job relaunches must run the same code as the first",
        )
    _check_line("python", spec.python)
    _check_path("pvc_mount", spec.pvc_mount)
    mount = posixpath.normpath(spec.pvc_mount)
    if mount == "/" or mount in (SCRATCH_DIR, BUNDLE_DIR) or BUNDLE_DIR.startswith(mount + "/"):
        raise _refuse(
            "pvc_mount", spec.pvc_mount, f"it must not be /, {SCRATCH_DIR} or hold {BUNDLE_DIR}"
        )
    _check_path("control_dir", spec.control_dir)
    if not posixpath.normpath(spec.control_dir).startswith(mount + "/"):
        raise _refuse(
            "control_dir",
            spec.control_dir,
            f"it must lie on the PVC (under {spec.pvc_mount}): the agent's records must "
            "outlive the pod",
        )
    _check_count("gpus", spec.gpus, "it must be a whole number, 0 or more")
    for name, quantity in (("cpu", spec.cpu), ("memory", spec.memory)):
        if quantity is not None:
            _check_quantity(name, quantity)
    _check_quantity("scratch_size", spec.scratch_size)
    _check_count("backoff_limit", spec.backoff_limit, "it must be a whole number, 0 or more")
    _check_count("grace_s", spec.grace_s, "it must be whole seconds, 0 or more")
    if spec.active_deadline_s is not None and (
        not _is_int(spec.active_deadline_s) or spec.active_deadline_s <= 0
    ):
        raise _refuse(
            "active_deadline_s", spec.active_deadline_s, "it must be whole seconds above 0"
        )
    for key, value in spec.labels.items():
        _check_label(key, value)


# -- manifests -------------------------------------------------------------------------------


def _labels(spec: K8sJobSpec) -> dict[str, str]:
    return {**spec.labels, MANAGED_BY: MANAGER, JOB_LABEL: k8s_name(spec.job_id)}


def render_job(spec: K8sJobSpec) -> dict[str, Any]:
    """The batch/v1 Job manifest for ``spec`` as a plain dict (what ``kubectl apply`` takes)."""
    validate(spec)
    name = k8s_name(spec.job_id)
    labels = _labels(spec)
    # Annotations take any string, so the exact id (and the user's name) live there.
    annotations = {ID_ANNOTATION: spec.job_id, NAME_ANNOTATION: spec.name}
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if spec.gpus:
        # Extended resources go in limits only; Kubernetes copies the limit into the request.
        limits["nvidia.com/gpu"] = str(spec.gpus)
    for key, quantity in (("cpu", spec.cpu), ("memory", spec.memory)):
        if quantity is not None:
            limits[key] = requests[key] = quantity
    resources: dict[str, Any] = {"limits": limits}
    if requests:
        resources["requests"] = requests
    container = {
        "name": CONTAINER,
        "image": spec.image,
        # An argv list reaches the kernel as is: no shell, so any path is passed exactly.
        "command": [
            spec.python or "python3",
            "-u",
            f"{BUNDLE_DIR}/{BUNDLE_KEY}",
            "run",
            spec.control_dir,
        ],
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "RGT_K8S", "value": "1"},
        ],
        "resources": resources,
        "volumeMounts": [
            {"name": "checkpoints", "mountPath": spec.pvc_mount},
            {"name": "scratch", "mountPath": SCRATCH_DIR},
            {"name": "bundle", "mountPath": BUNDLE_DIR, "readOnly": True},
        ],
    }
    pod_spec: dict[str, Any] = {
        # A failed pod is replaced by a new one (counted by backoffLimit); the agent in it
        # resumes from the checkpoint on the PVC.
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": spec.grace_s,
        "containers": [container],
        "volumes": [
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": spec.pvc}},
            {"name": "scratch", "emptyDir": {"sizeLimit": spec.scratch_size}},
            {
                "name": "bundle",
                "secret": {
                    "secretName": f"{name}-bundle",
                    "defaultMode": 0o400,
                    "items": [{"key": BUNDLE_KEY, "path": BUNDLE_KEY}],
                },
            },
        ],
    }
    if spec.service_account is not None:
        pod_spec["serviceAccountName"] = spec.service_account
    else:
        # The program has no business with the cluster's API: keep its token out of the pod.
        pod_spec["automountServiceAccountToken"] = False
    job_spec: dict[str, Any] = {
        "backoffLimit": spec.backoff_limit,
        "template": {
            "metadata": {"labels": labels, "annotations": dict(annotations)},
            "spec": pod_spec,
        },
    }
    if spec.active_deadline_s is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_s
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": spec.namespace,
            "labels": dict(labels),
            "annotations": annotations,
        },
        "spec": job_spec,
    }


def render_bundle_secret(spec: K8sJobSpec, bundle: bytes) -> dict[str, Any]:
    """The core/v1 Secret ``<name>-bundle`` holding the launch bundle, as a plain dict."""
    validate(spec)
    if len(bundle) > MAX_BUNDLE_BYTES:
        raise UsageError(
            f"The launch bundle is {len(bundle) / 1024:.0f} KiB; a Kubernetes Secret holds at "
            f"most {MAX_BUNDLE_BYTES // 1024} KiB. Bake large files (data, weights, packages) "
            "into the image, or read them from the PVC, and launch again."
        )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{k8s_name(spec.job_id)}-bundle",
            "namespace": spec.namespace,
            "labels": _labels(spec),
            "annotations": {ID_ANNOTATION: spec.job_id},
        },
        "type": "Opaque",
        # Relaunched pods must read the same bundle the first one did.
        "immutable": True,
        "data": {BUNDLE_KEY: base64.b64encode(bundle).decode("ascii")},
    }
