"""The ``ray`` backend: jobs on a Ray cluster through its Jobs REST API (see :mod:`.launcher`)."""

from .launcher import RayBackend

__all__ = ["RayBackend"]
