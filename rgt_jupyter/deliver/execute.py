"""A kernel for executing a notebook headless: ``python3`` started with this very interpreter.

:func:`kernel_manager` gives the manager that nbclient starts it with (``rgt repro`` rebuilding a
delivery, ``rgt demo`` running the quickstart); :data:`KERNEL_NAME` is the kernel name to pass
beside it.
"""

from __future__ import annotations

import sys

import zmq
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

KERNEL_NAME = "python3"


class ThisInterpreterSpecs(KernelSpecManager):
    """Resolves the ``python3`` kernel to the interpreter running this process.

    A ``python3`` kernelspec found on the Jupyter path may name another Python (a user-wide
    install, another venv) that lacks torch or rgt_jupyter; a notebook run here must not depend
    on that.
    """

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        """The spec for ``kernel_name``: ``python3`` is always ``sys.executable``."""
        if kernel_name != KERNEL_NAME:
            spec: KernelSpec = super().get_kernel_spec(kernel_name)
            return spec
        return KernelSpec(
            argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name=f"Python {sys.version_info.major} ({sys.executable})",
            language="python",
            interrupt_mode="signal",
            metadata={"debugger": False, "supported_encryption": ["curve"]},
        )


def kernel_manager() -> AsyncKernelManager:
    """A kernel manager that starts ``python3`` with this interpreter, its local TCP channels
    encrypted (CurveZMQ) where this pyzmq and jupyter_client support it."""
    km = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ThisInterpreterSpecs())
    if km.has_trait("transport_encryption") and zmq.has("curve"):
        km.transport_encryption = "auto"
    return km
