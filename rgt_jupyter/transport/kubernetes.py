"""Kubernetes jobs through the same launch, watch and stop paths as every other profile.

The launch bundle (agent, cell, ``launch.json``, secrets) becomes a Secret mounted read-only in
the pod; the Job's container runs ``python bundle.zip run CONTROL_DIR`` with the control dir on
the profile's PersistentVolumeClaim, so a new pod (backoffLimit) resumes from the checkpoints
there. The notebook sees the job through the API server: one Job list and one Pod list per poll
for every followed job of a namespace (:class:`_Poller`), and the newest pod's log.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import TransportError
from .base import ExecResult, FileStat, ReadStream, Transport


class KubeTransport(Transport):
    """Stands where a transport stands for a Kubernetes profile: the pod's files live on the
    cluster's volume, out of reach of this machine, so reads find nothing and commands refuse."""

    name = "kubernetes"

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.host = f"k8s/{namespace}"

    def _refuse(self) -> TransportError:
        return TransportError(
            f"this job runs in Kubernetes ({self.host}): there is no shell on its pods "
            "from here. Bake pushed files into the image (--push is not available) and read "
            "results from the claim"
        )

    def exec(
        self, argv: list[str], *, stdin: bytes | None = None, timeout: float | None = 60.0
    ) -> ExecResult:
        raise self._refuse()

    def read_bytes(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        raise FileNotFoundError(path)

    def write_bytes(self, path: str, data: bytes, mode: int = 0o644) -> None:
        raise self._refuse()

    def put(self, local: Path, remote: str) -> None:
        raise self._refuse()

    def open_read(self, path: str, offset: int = 0) -> ReadStream:
        raise FileNotFoundError(path)

    def stat(self, path: str) -> FileStat | None:
        return None

    def makedirs(self, path: str, mode: int = 0o755) -> None:
        raise self._refuse()

    def listdir(self, path: str) -> list[str]:
        raise FileNotFoundError(path)

    def home(self) -> str:
        return "/root"
