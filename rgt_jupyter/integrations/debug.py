"""Training-debug probes of the model and of a resume: what was seen, its likely root cause and
the next thing to try.

::

    from rgt_jupyter.integrations.debug import audit_resume, watch_model

    watch = watch_model(model, optimizer, scaler=scaler)   # hooks; a low default cadence
    state = job.load_latest()
    if state:
        ...                                                 # the loop restores what it restores
        audit_resume(state, model=model, optimizer=optimizer, scheduler=sched, step=start)
    for x, y in loader:
        loss = ...
        watch.loss(loss)                                    # optional: a NaN at its own step

The data probes are in :mod:`rgt_jupyter.integrations.debug_data`. Each probe is opt-in and
cheap. A finding (``job.finding``) is a record ``{"kind", "seen", "cause", "fix", "step"}``,
once per kind and subject, in ``findings.json`` of the job's control dir, where the view shows
it, and on stderr. It is disclosed only: nothing is stopped, retried or changed in the training.
Stdlib only at import (Python 3.8+); torch is used through the objects handed in.
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Callable
from typing import Any

from .. import job

__all__ = [
    "watch_model",
    "ModelWatch",
    "audit_resume",
    "overfit_one_batch",
    "OverfitFailed",
    "check_dist_env",
]

#: The checks of a model watch: its first optimizer steps, then every ``every`` steps.
EARLY_STEPS = 3
#: An update this large against its weights (per parameter group) is a learning rate far too
#: high: one step moves the weights by more than their own size.
UPDATE_RATIO_HIGH = 1.0
#: This many overflow-skipped steps in a row, or a scale below 1, is a collapsing GradScaler.
SCALER_SKIPS = 8
#: At most this many elements of each parameter are compared before and after a step.
SAMPLE = 4096

report = job.finding

# ----------------------------------------------------------------------------- the model


def _norm(tensors: list[Any]) -> float:
    total = 0.0
    for t in tensors:
        total += float(t.detach().float().norm()) ** 2
    return math.sqrt(total)


def _sample(p: Any) -> Any:
    flat = p.detach().reshape(-1)
    stride = max(1, flat.numel() // SAMPLE)
    return flat[::stride][:SAMPLE].float().clone()


class ModelWatch:
    """The hooks :func:`watch_model` put on a model's optimizer (and GradScaler), and what they
    saw: ``history`` holds, per checked step, each parameter group's grad norm, update norm
    and update/weight ratio. :meth:`remove` takes the hooks off."""

    def __init__(self, model: Any, optimizer: Any, scaler: Any = None, every: int = 50) -> None:
        self.model = model
        self.optimizer = optimizer
        self.scaler = scaler
        self.every = max(1, int(every))
        self.step = 0
        self.history: list[dict[str, Any]] = []
        self._names = {id(p): n for n, p in model.named_parameters()} if model is not None else {}
        self._before: dict[int, Any] = {}
        self._no_grad: dict[int, Any] = {}
        self._no_change: dict[int, Any] = {}
        self._checks = 0
        self._skips = 0
        self._last_scale: float | None = None
        self._losses: list[float] = []
        self._handles: list[Any] = []
        if optimizer is not None:
            self._handles.append(optimizer.register_step_pre_hook(self._pre))
            self._handles.append(optimizer.register_step_post_hook(self._post))
            for p in self._params():
                self._no_grad[id(p)] = p
                self._no_change[id(p)] = p
            self._not_optimized()
        if scaler is not None:
            self._wrap_scaler(scaler)

    def _params(self) -> list[Any]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _name(self, p: Any) -> str:
        return self._names.get(id(p), f"parameter of shape {tuple(p.shape)}")

    def _due(self, step: int) -> bool:
        return step <= EARLY_STEPS or step % self.every == 0

    def _not_optimized(self) -> None:
        if self.model is None:
            return
        held = {id(p) for p in self._params()}
        left = [
            n for n, p in self.model.named_parameters() if p.requires_grad and id(p) not in held
        ]
        if left:
            report(
                "not_optimized",
                f"{len(left)} trainable parameter(s) are in no optimizer group "
                f"({', '.join(left[:5])})",
                "the optimizer was built from a part of the model, or before a layer was added",
                "build the optimizer from model.parameters() after the model is complete",
                subject=",".join(left[:5]),
            )

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        step = self.step + 1
        if not self._due(step):
            return
        self._checks += 1
        if self.model is not None and not getattr(self.model, "training", True):
            if self._has_mode_layers():
                report(
                    "eval_mode",
                    f"the model is in eval mode at optimizer step {step}",
                    "model.eval() left on (after a validation pass): dropout and batch norm "
                    "train as in inference",
                    "call model.train() before the training batches",
                    step,
                )
        row: dict[str, Any] = {"step": step, "groups": []}
        grads_seen = 0
        for i, group in enumerate(optimizer.param_groups):
            grads = [p.grad for p in group["params"] if p.grad is not None]
            grads_seen += len(grads)
            norm = _norm(grads)
            row["groups"].append({"group": i, "grad_norm": norm, "lr": group.get("lr")})
            if not math.isfinite(norm):
                report(
                    "nonfinite_grad",
                    f"the gradient norm of parameter group {i} is {norm} at step {step}",
                    "a NaN/Inf in the loss or activations (fp16 overflow, log(0), a division "
                    "by zero, a bad batch) or a learning rate that made the weights diverge",
                    "check the batch and the loss at this step; lower the LR; clip gradients; "
                    "use bf16 or a GradScaler",
                    step,
                )
            for p in group["params"]:
                if p.grad is not None:
                    self._no_grad.pop(id(p), None)
        if grads_seen and all(g["grad_norm"] == 0 for g in row["groups"]):
            report(
                "zero_grads",
                f"every gradient is exactly zero at optimizer step {step}",
                "optimizer.zero_grad() runs between loss.backward() and optimizer.step()",
                "call zero_grad() before backward() (or right after step())",
                step,
            )
        self._before = {id(p): _sample(p) for p in self._params() if p.grad is not None}
        self.history.append(row)

    def _post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.step += 1 if self.scaler is None else 0
        step = self.step if self.scaler is None else self.step + 1
        if not self._before:
            if self._due(step) and self._checks >= EARLY_STEPS:
                self._decide(step)
            return
        row = self.history[-1]
        for i, group in enumerate(optimizer.param_groups):
            delta, weight = [], []
            for p in group["params"]:
                old = self._before.get(id(p))
                if old is None:
                    weight.append(_sample(p))
                    continue
                new = _sample(p)
                delta.append(new - old)
                weight.append(old)
                if float((new - old).abs().max()) != 0:
                    self._no_change.pop(id(p), None)
            update, size = _norm(delta), _norm(weight)
            ratio = update / size if size > 1e-12 else None
            row["groups"][i].update(update_norm=update, update_ratio=ratio)
            if ratio is not None and ratio > UPDATE_RATIO_HIGH and math.isfinite(ratio):
                report(
                    "lr_too_high",
                    f"one step changed parameter group {i} by {ratio:.3g} times its size (update "
                    f"norm {update:.3g}, weight norm {size:.3g}, lr {group.get('lr')}) at step "
                    f"{step}",
                    "the learning rate is far too high for this model (a healthy step changes "
                    "the weights by about 1e-3 of their size)",
                    "lower the LR by 10-1000x, or add warmup; check the LR scheduler's units",
                    step,
                    subject=str(i),
                )
        self._before = {}
        if self._checks >= EARLY_STEPS and (self._checks == EARLY_STEPS or step % self.every == 0):
            self._decide(step)

    def _decide(self, step: int) -> None:
        """After the early checks: parameters that never had a gradient, or never changed."""
        params = self._params()
        never = [p for p in self._no_grad.values()]
        if params and len(never) == len(params):
            report(
                "grads_cleared",
                f"no parameter had a gradient at optimizer.step() in the first {step} steps",
                "optimizer.zero_grad() (set_to_none) runs between loss.backward() and "
                "optimizer.step(), or backward() is never called",
                "call zero_grad() before backward(); make sure loss.backward() runs each step",
                step,
            )
        elif never:
            frozen = [self._name(p) for p in never if not p.requires_grad]
            unused = [self._name(p) for p in never if p.requires_grad]
            if frozen:
                report(
                    "frozen_params",
                    f"{len(frozen)} parameter(s) the optimizer trains never got a gradient: they "
                    f"have requires_grad=False ({', '.join(frozen[:5])})",
                    "a layer is frozen (requires_grad_(False), a leftover of fine-tuning) while "
                    "it is meant to train",
                    "unfreeze it (requires_grad_(True)), or leave it out of the optimizer",
                    step,
                    subject=",".join(frozen[:5]),
                )
            if unused:
                report(
                    "unused_params",
                    f"{len(unused)} parameter(s) never got a gradient in {step} steps "
                    f"({', '.join(unused[:5])})",
                    "they take no part in the loss: a layer not used in forward(), a detach(), "
                    "or a torch.no_grad() around part of the model",
                    "check forward() uses them and nothing detaches their output",
                    step,
                    subject=",".join(unused[:5]),
                )
        still = [p for p in self._no_change.values() if id(p) not in self._no_grad]
        if still:
            names = [self._name(p) for p in still]
            lrs = sorted({str(g.get("lr")) for g in self.optimizer.param_groups})
            report(
                "no_update",
                f"{len(still)} parameter(s) had gradients but never changed in {step} steps "
                f"({', '.join(names[:5])}; lr {'/'.join(lrs)})",
                "a learning rate of 0 (a scheduler at 0, warmup from 0) or gradients zeroed "
                "before optimizer.step()",
                "print the LR each step; call zero_grad() before backward()",
                step,
                subject=",".join(names[:5]),
            )
        self._no_grad = {}
        self._no_change = {}

    def _wrap_scaler(self, scaler: Any) -> None:
        update = scaler.update

        def watched(new_scale: Any = None) -> Any:
            before = float(scaler.get_scale()) if scaler.is_enabled() else None
            out = update(new_scale)
            self.step += 1
            if before is None:
                return out
            after = float(scaler.get_scale())
            self._skips = self._skips + 1 if after < before else 0
            self._last_scale = after
            if self._skips >= SCALER_SKIPS or after < 1.0:
                report(
                    "scaler_collapse",
                    f"the GradScaler's scale fell {self._skips} steps in a row to {after:.3g} at "
                    f"step {self.step}: each of those steps found Inf/NaN gradients and was "
                    "skipped",
                    "fp16 overflow in the forward or loss (values above 65504), a loss that is "
                    "Inf/NaN in itself, or an init_scale far too large",
                    "compute the loss in fp32, use bf16, lower init_scale, look for log(0) or "
                    "a division by zero; a scale below 1 means the unscaled loss overflows",
                    self.step,
                )
            return out

        scaler.update = watched

    def _has_mode_layers(self) -> bool:
        kinds = ("Dropout", "BatchNorm", "InstanceNorm")
        return any(any(k in type(m).__name__ for k in kinds) for m in self.model.modules())

    def loss(self, value: Any, step: int | None = None) -> None:
        """Check one step's loss, after its ``optimizer.step()`` (or give its ``step``); its
        float is taken (a sync on a GPU). A NaN/Inf is a finding at the step it first appears."""
        number = float(value.detach() if hasattr(value, "detach") else value)
        if job.smoke_mode() == "overfit":
            self._overfit_loss(number)
        if not math.isfinite(number):
            at = max(self.step, 1) if step is None else int(step)
            report(
                "nonfinite_loss",
                f"the loss is {number} at step {at}",
                "fp16 overflow, log(0) or a division by zero in the loss, a bad batch, or a "
                "learning rate that made the weights diverge",
                "check the batch at this step, compute the loss in fp32, lower the LR, clip "
                "gradients",
                at,
            )

    def _overfit_loss(self, number: float) -> None:
        """Under ``--smoke=overfit`` (the same first batch each step): once the smoke's steps
        are seen, whether the loss fell as far as it must (``overfit.json`` for the smoke)."""
        self._losses.append(number)
        if len(self._losses) != job.OVERFIT_STEPS:
            return
        first, last = self._losses[0], min(self._losses[-3:])
        passed = math.isfinite(first) and math.isfinite(last) and last <= OVERFIT_DROP * first
        seen = (
            f"on one fixed batch the loss went from {first:.4g} to {last:.4g} in "
            f"{len(self._losses)} steps (it must fall to {OVERFIT_DROP:g} of its start)"
        )
        control = os.environ.get("RGT_CONTROL_DIR")
        if control:
            with open(os.path.join(control, "overfit.json"), "w") as fh:
                json.dump({"passed": passed, "first": first, "last": last, "seen": seen}, fh)
        if not passed:
            causes = "; ".join(f"({i}) {c}" for i, c in enumerate(OVERFIT_CAUSES, 1))
            report("cannot_overfit", seen, causes, "fix the first cause that applies")
            raise OverfitFailed(
                f"the model cannot overfit one batch: {seen}. Usual causes: {causes}"
            )

    def remove(self) -> None:
        """Take the hooks off."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self.scaler is not None and "update" in vars(self.scaler):
            del self.scaler.update


def watch_model(
    model: Any, optimizer: Any = None, scaler: Any = None, every: int = 50
) -> ModelWatch:
    """Watch a model's training through hooks on its optimizer (and ``scaler``, a GradScaler):
    at its first steps and then every ``every`` steps, each parameter group's grad norm and
    update norm. Findings: parameters that never receive a gradient (frozen, unused) or never
    change, every gradient zero or cleared before ``step()``, an update far larger than the
    weights (LR too high), non-finite gradients, a collapsing GradScaler scale, the model left
    in eval mode, trainable parameters in no optimizer group."""
    return ModelWatch(model, optimizer, scaler=scaler, every=every)


# ----------------------------------------------------------------------------- resume


def _has(state: dict[str, Any], *keys: str) -> str | None:
    for key, value in state.items():
        if any(k in str(key).lower() for k in keys) and value is not None:
            return str(key)
    return None


def _optimizer_state(state: dict[str, Any]) -> dict[str, Any] | None:
    for value in state.values():
        if isinstance(value, dict) and "state" in value and "param_groups" in value:
            return value
    return None


def audit_resume(
    state: dict[str, Any],
    model: Any = None,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    ema: Any = None,
    step: int | None = None,
) -> list[dict[str, Any]]:
    """At a resume, compare what the checkpoint ``state`` holds with what the loop restored
    (call it after the loop's own restore): an optimizer, scheduler, scaler or EMA that the
    checkpoint does not hold or the loop did not load, and a loop that starts at another
    ``step`` than the one saved. Returns the findings made."""
    out: list[dict[str, Any] | None] = []
    saved_step = None
    for key in ("step", "global_step", "epoch"):
        if isinstance(state.get(key), (int, float)):
            saved_step = int(state[key])
            break
    opt = _optimizer_state(state)
    if optimizer is not None and opt is None:
        out.append(
            report(
                "resume_optimizer",
                "the checkpoint holds no optimizer state (keys: {}); the resumed optimizer "
                "starts empty".format(", ".join(sorted(map(str, state))[:8])),
                "the saved dict leaves out optimizer.state_dict(): momentum / Adam moments "
                "restart from zero and the resumed run differs from one never stopped",
                "save {'optimizer': optimizer.state_dict()} in each checkpoint and "
                "optimizer.load_state_dict() it at resume",
                saved_step,
            )
        )
    elif optimizer is not None and opt is not None and opt.get("state") and not optimizer.state:
        out.append(
            report(
                "resume_optimizer",
                f"the checkpoint holds optimizer state for {len(opt['state'])} parameters but "
                "the resumed optimizer holds none",
                "the loop does not call optimizer.load_state_dict() at resume",
                "optimizer.load_state_dict(state['optimizer']) after building the optimizer",
                saved_step,
            )
        )
    if optimizer is not None and opt is not None:
        saved_lrs = [g.get("lr") for g in opt.get("param_groups", [])]
        live_lrs = [g.get("lr") for g in optimizer.param_groups]
        if saved_lrs and len(saved_lrs) == len(live_lrs) and saved_lrs != live_lrs:
            out.append(
                report(
                    "resume_lr",
                    f"the resumed optimizer's LR is {live_lrs}; it was {saved_lrs} at the save",
                    "the optimizer's state is overwritten after its restore (a new optimizer, "
                    "a scheduler built afterwards that resets the LR, or an LR set by hand)",
                    "restore the optimizer, then the scheduler, and set nothing after them",
                    saved_step,
                )
            )
    sched_key = _has(state, "sched")
    if scheduler is not None:
        live = getattr(scheduler, "last_epoch", None)
        saved = state.get(sched_key) if sched_key else None
        want = saved.get("last_epoch") if isinstance(saved, dict) else None
        if sched_key is None or (want is not None and live != want):
            out.append(
                report(
                    "resume_scheduler",
                    "the LR scheduler is at step {} after the resume; the checkpoint {}".format(
                        live, "holds none" if sched_key is None else f"saved {want}"
                    ),
                    "the scheduler's state is not saved or not restored: the LR restarts "
                    "(warmup again, a wrong decay)",
                    "save scheduler.state_dict() and scheduler.load_state_dict() it at resume",
                    saved_step,
                )
            )
    if scaler is not None and scaler.is_enabled():
        scaler_key = _has(state, "scaler")
        saved = state.get(scaler_key) if scaler_key else None
        if not isinstance(saved, dict) or float(saved.get("scale", 0)) != scaler.get_scale():
            out.append(
                report(
                    "resume_scaler",
                    "the GradScaler's scale is {} after the resume; the checkpoint {}".format(
                        scaler.get_scale(), "holds none" if scaler_key is None else "saved another"
                    ),
                    "the AMP scaler's state is not saved or not restored: overflow-skipped "
                    "steps again at the resume",
                    "save scaler.state_dict() and scaler.load_state_dict() it at resume",
                    saved_step,
                )
            )
    if ema is not None and _has(state, "ema", "average") is None:
        out.append(
            report(
                "resume_ema",
                "the checkpoint holds no EMA weights",
                "the EMA is not saved: it restarts from the current weights at the resume",
                "save the EMA's state_dict() in each checkpoint and restore it",
                saved_step,
            )
        )
    if step is not None and saved_step is not None and int(step) != saved_step:
        out.append(
            report(
                "resume_step",
                f"the loop resumes at step {int(step)}; the checkpoint was saved at {saved_step}",
                "the loop's start step / epoch is not taken from the checkpoint: it repeats "
                "or skips data and the LR schedule",
                "start the loop at state['step'] (+1) and restore the sampler's epoch",
                saved_step,
            )
        )
    if step is not None and saved_step is None:
        out.append(
            report(
                "resume_step",
                "the checkpoint holds no step or epoch",
                "the position in training is not saved: a resume starts the schedule and "
                "the data order over",
                "save 'step' (and 'epoch') in each checkpoint",
            )
        )
    return [f for f in out if f is not None]


# ----------------------------------------------------------------------------- overfit one batch

#: The loss must fall to this share of its first value on one batch, within the steps given.
OVERFIT_DROP = 0.1
#: The usual causes of a model that cannot overfit one batch, most likely first.
OVERFIT_CAUSES = (
    "a learning rate far too low, 0, or far too high",
    "frozen or never-updated parameters (requires_grad=False, a layer not used in forward())",
    "zero_grad() misplaced, or backward() not reaching the parameters (a detach())",
    "model.eval() left on (dropout, batch norm)",
    "a loss that does not match the outputs and targets (logits vs probabilities, the wrong "
    "axis, the wrong label dtype)",
)


class OverfitFailed(AssertionError):
    """The model did not overfit one batch (raised in the CPU smoke run, which then blocks the
    launch)."""


def overfit_one_batch(
    model: Any,
    optimizer: Any,
    batch: Any,
    loss_fn: Callable[[Any, Any], Any],
    steps: int = 50,
    drop: float = OVERFIT_DROP,
) -> dict[str, Any]:
    """Train ``model`` with ``optimizer`` on one fixed ``batch`` for ``steps`` steps
    (``loss_fn(model, batch)`` is the loss) and say whether the loss fell to ``drop`` of its
    first value, as a model that can learn does. The model's and the optimizer's states are put
    back afterwards. A failure is a finding (``cannot_overfit``) with the usual causes in order;
    in the CPU smoke run (``job.is_smoke()``) it raises :class:`OverfitFailed`, so the launch
    is blocked before any GPU hour is spent. Returns ``{"first", "last", "passed", "steps"}``."""
    saved_model = copy.deepcopy(model.state_dict())
    saved_opt = copy.deepcopy(optimizer.state_dict())
    losses = []
    try:
        for _ in range(max(2, int(steps))):
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    finally:
        model.load_state_dict(saved_model)
        optimizer.load_state_dict(saved_opt)
    first, last = losses[0], min(losses[-3:])
    finite = math.isfinite(first) and math.isfinite(last)
    passed = finite and last <= drop * first
    result = {"first": first, "last": last, "passed": passed, "steps": len(losses)}
    if passed:
        return result
    seen = (
        f"on one fixed batch the loss went from {first:.4g} to {last:.4g} in {len(losses)} "
        f"steps (it must fall to {drop:g} of its start)"
    )
    causes = "; ".join(f"({i}) {c}" for i, c in enumerate(OVERFIT_CAUSES, 1))
    report(
        "cannot_overfit",
        seen,
        causes,
        "fix the first cause that applies, then overfit one batch again (watch_model names "
        "frozen parameters, zeroed gradients and the LR)",
    )
    if job.is_smoke():
        raise OverfitFailed(f"the model cannot overfit one batch: {seen}. Usual causes: {causes}")
    return result


# ----------------------------------------------------------------------------- multi-process

#: What torchrun (and accelerate) set in every process of a distributed job.
DIST_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _whole(value: str | None) -> int | None:
    try:
        return int(value) if value is not None and value != "" else None
    except ValueError:
        return None


def check_dist_env(env: dict[str, str] | None = None) -> list[str]:
    """Check the distributed launch contract in ``env`` (default: this process's environment)
    before ``init_process_group``: all of ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``, ``MASTER_PORT`` or none, ranks inside the world, a port that is one, and
    no more processes on this node than GPUs it sees. Returns the problems (one ``dist_env``
    finding says them all); empty for a consistent contract or a single-process job."""
    env = dict(os.environ) if env is None else env
    present = [k for k in DIST_KEYS if env.get(k)]
    if not present:
        return []
    problems = []
    missing = [k for k in DIST_KEYS if k not in present]
    if missing:
        verb = "is" if len(present) == 1 else "are"
        problems.append(f"{', '.join(missing)} not set while {', '.join(present)} {verb}")
    rank, world = _whole(env.get("RANK")), _whole(env.get("WORLD_SIZE"))
    local, local_world = _whole(env.get("LOCAL_RANK")), _whole(env.get("LOCAL_WORLD_SIZE"))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        if env.get(key) and _whole(env.get(key)) is None:
            problems.append(f"{key}={env[key]!r} is not a whole number")
    if rank is not None and world is not None and not 0 <= rank < world:
        problems.append(f"RANK {rank} is outside WORLD_SIZE {world}")
    if local is not None and local_world is not None and not 0 <= local < local_world:
        problems.append(f"LOCAL_RANK {local} is outside LOCAL_WORLD_SIZE {local_world}")
    if local_world is not None and world is not None and local_world > world:
        problems.append(f"LOCAL_WORLD_SIZE {local_world} is above WORLD_SIZE {world}")
    port = _whole(env.get("MASTER_PORT"))
    if env.get("MASTER_PORT") and (port is None or not 0 < port < 65536):
        problems.append(f"MASTER_PORT={env['MASTER_PORT']!r} is not a port")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    gpus = len([d for d in visible.split(",") if d.strip()]) if visible is not None else None
    if gpus is not None and local_world is not None and 0 < gpus < local_world:
        problems.append(
            f"{local_world} processes on this node but CUDA_VISIBLE_DEVICES shows {gpus} GPU(s)"
        )
    if problems:
        report(
            "dist_env",
            "the distributed environment is inconsistent: " + "; ".join(problems),
            "the launcher's contract is incomplete or set by hand: processes wait at "
            "init_process_group for peers that never join (a hang, then a timeout)",
            "launch with torchrun --nproc-per-node N (or accelerate launch), which sets RANK, "
            "WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT alike in every process; do "
            "not set them by hand",
        )
    return problems
