"""The ``detached`` and ``tmux`` backends: the agent in its own session on any machine the
transport reaches (this one, or one over SSH); see :mod:`.launcher`."""

from .launcher import DetachedBackend, TmuxBackend

__all__ = ["DetachedBackend", "TmuxBackend"]
