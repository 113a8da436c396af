"""The VERIFY checks, in the order they run. Each takes a :class:`~..model.Context` and returns
its findings (a ``pass`` or ``not_checked`` finding too, so what was and was not checked is
always said)."""

from __future__ import annotations

from collections.abc import Callable

from ..model import Context, Finding
from .budget import tuning_budget
from .collapse import collapse
from .direction import metric_direction
from .leakage import leakage
from .one_variable import one_variable
from .rederive import rederive
from .seed_noise import seed_noise
from .selection import test_selection
from .stale import stale_artifact
from .tasks import tasks_iqm
from .two_level import two_level_noise

Check = Callable[[Context], list[Finding]]


def all_checks() -> list[tuple[str, Check]]:
    """(name, function) of every check, in running order."""

    return [
        ("metric_direction", metric_direction),
        ("one_variable", one_variable),
        ("seed_noise", seed_noise),
        ("two_level_noise", two_level_noise),
        ("tasks_iqm", tasks_iqm),
        ("tuning_budget", tuning_budget),
        ("leakage", leakage),
        ("test_selection", test_selection),
        ("collapse", collapse),
        ("rederive", rederive),
        ("stale_artifact", stale_artifact),
    ]
