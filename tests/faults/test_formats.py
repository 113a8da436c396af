"""Checkpoints as people save them, pulled through the product path and judged by the gate: the
formats frameworks write load safely; a pickle of a class outside the allowlist stands verified
by sha256 only, disclosed; a damaged file or a pickle that would run code is refused, and its
payload never runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rgt_jupyter import submit
from rgt_jupyter.api import Job
from rgt_jupyter.errors import UsageError
from rgt_jupyter.jobs.request import LaunchRequest
from rgt_jupyter.run.teardown import compute_gate, decide

from ..machines import RENTED
from .evidence import Evidence

SAFE_LOAD = "rgt_jupyter/run/safe_load.py"
FORMATS = "rgt_jupyter/run/pull/formats.py"

#: An HF Trainer checkpoint folder as ``Trainer._save_checkpoint`` writes it (a tiny GPT-2 made
#: from a config), without ``training_args.bin``.
HF_FOLDER = """\
import argparse, json, os, random, tempfile
import numpy as np, torch
import rgt_jupyter.job as job
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel
ck = os.environ["RGT_CKPT_DIR"]
torch.manual_seed(0); np.random.seed(0); random.seed(0)
hf = os.path.join(ck, "checkpoint-2")
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=32, n_positions=16))
model.save_pretrained(hf)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
opt.step()
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
torch.save(opt.state_dict(), os.path.join(hf, "optimizer.pt"))
torch.save(sched.state_dict(), os.path.join(hf, "scheduler.pt"))
rng = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state()}
torch.save(rng, os.path.join(hf, "rng_state.pth"))
with open(os.path.join(hf, "trainer_state.json"), "w") as fh:
    json.dump({"global_step": 2, "log_history": [{"loss": 3.4, "step": 2}]}, fh)
"""

#: Beside the HF folder: an Accelerate ``save_state`` folder, a Lightning ``.ckpt`` (Namespace
#: hyper-parameters, an AttributeDict), a plain safetensors file, a Namespace saved with torch.
FORMATS_JOB = (
    HF_FOLDER
    + """\
acc = os.path.join(ck, "accelerate", "checkpoint_0")
os.makedirs(acc)
layer = torch.nn.Linear(4, 2)
save_file({k: v.contiguous() for k, v in layer.state_dict().items()}, acc + "/model.safetensors")
opt2 = torch.optim.SGD(layer.parameters(), lr=0.1)
torch.save(opt2.state_dict(), acc + "/optimizer.bin")
torch.save(torch.optim.lr_scheduler.StepLR(opt2, 1).state_dict(), acc + "/scheduler.bin")
states = {"step": 0, "random_state": random.getstate(), "numpy_random_seed": np.random.get_state(),
          "torch_manual_seed": torch.get_rng_state()}
torch.save(states, acc + "/random_states_0.pkl")

import lightning as L
from lightning.fabric.utilities.data import AttributeDict

class Lit(L.LightningModule):
    def __init__(self, args):
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 2)
    def training_step(self, batch, i):
        return self.layer(batch[0]).sum()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
    def on_save_checkpoint(self, checkpoint):
        checkpoint["loop_state"] = AttributeDict(seen=8, epoch=0)

data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, default_root_dir=tempfile.mkdtemp())
trainer.fit(Lit(argparse.Namespace(lr=0.1, depth=2)), data)
os.makedirs(os.path.join(ck, "lightning"))
trainer.save_checkpoint(os.path.join(ck, "lightning", "last.ckpt"))

save_file({"w": torch.randn(8, 8)}, os.path.join(ck, "weights.safetensors"))
torch.save({"args": argparse.Namespace(lr=0.1, layers=2), "model": layer.state_dict()},
           os.path.join(ck, "args.pt"))
with open(os.path.join(os.environ["RGT_OUT"], "preds.csv"), "w") as fh:
    fh.write("id,pred\\n1,0\\n")
job.save_results({"val": {"loss": 3.4}})
"""
)

#: The whole HF folder, ``training_args.bin`` included: a pickled ``TrainingArguments`` (built
#: field by field: its ``__post_init__`` wants ``accelerate``, which the test venv lacks).
TRAINING_ARGS_JOB = (
    HF_FOLDER
    + """\
import dataclasses
from transformers import TrainingArguments
from transformers.trainer_utils import IntervalStrategy
args = TrainingArguments.__new__(TrainingArguments)
for f in dataclasses.fields(TrainingArguments):
    if f.default is not dataclasses.MISSING:
        setattr(args, f.name, f.default)
    elif f.default_factory is not dataclasses.MISSING:
        setattr(args, f.name, f.default_factory())
args.output_dir, args.eval_strategy = ck, IntervalStrategy("steps")
torch.save(args, os.path.join(hf, "training_args.bin"))
job.save_results({"val": {"loss": 3.4}})
"""
)

#: A Trainer folder whose files are hostile or damaged: ``rng_state.pth`` spawns a process,
#: ``optimizer.pt`` calls ``os.system``, ``scheduler.pt`` a shell helper of a third-party
#: package, ``model.safetensors`` is cut short. Each payload would create a marker file.
HOSTILE_JOB = """\
import json, os, subprocess
import torch
import rgt_jupyter.job as job
from IPython.utils._process_common import getoutput
from safetensors.torch import save_file
ck = os.environ["RGT_CKPT_DIR"]
mark = os.path.abspath(os.path.join(os.environ["RGT_OUT"], "..", "PWNED"))
hf = os.path.join(ck, "checkpoint-2")
os.makedirs(hf)

class Spawn:
    def __reduce__(self):
        return (subprocess.Popen, (["touch", mark + "-popen"],))

class Shell:
    def __reduce__(self):
        return (os.system, ("touch " + mark + "-system",))

class Helper:
    def __reduce__(self):
        return (getoutput, ("touch " + mark + "-helper",))

torch.save({"python": Spawn(), "cpu": torch.get_rng_state()}, os.path.join(hf, "rng_state.pth"))
torch.save({"state": {}, "param_groups": [], "x": Shell()}, os.path.join(hf, "optimizer.pt"))
torch.save({"last_epoch": 1, "x": Helper()}, os.path.join(hf, "scheduler.pt"))
save_file({"w": torch.randn(64, 64)}, os.path.join(hf, "model.safetensors"))
path = os.path.join(hf, "model.safetensors")
data = open(path, "rb").read()
with open(path, "wb") as fh:
    fh.write(data[: len(data) // 2])
with open(os.path.join(hf, "trainer_state.json"), "w") as fh:
    json.dump({"global_step": 2}, fh)
job.save_results({"ok": True})
"""


def _rented(project: Path, program: str, name: str) -> Job:
    """A job on a metered machine (so the gate checks every file), run on this one."""
    profiles = project / ".rgt" / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)
    (profiles / "rented.toml").write_text(RENTED)
    job = submit(LaunchRequest(program=program, name=name, profile="rented"), project)
    assert job.wait(300) == "finished", job.log()
    return job


def _verdicts(run_verification: dict[str, object]) -> dict[str, str]:
    loads = run_verification["checkpoint_loads"]
    assert isinstance(loads, list)
    return {r["path"]: r["verdict"] for r in loads}


@pytest.mark.fault(
    "B-pickle",
    asserts="an HF Trainer folder (safetensors weights, optimizer, scheduler, a numpy RNG "
    "state), an Accelerate save_state folder, a Lightning .ckpt with Namespace hyper-parameters "
    "and an AttributeDict, a safetensors file and a torch-saved Namespace all load in the "
    "separate loader; the run is verified, names each folder's format and shows which files "
    "were load-checked and which only hashed; the gate passes",
    mutation=[
        (SAFE_LOAD, "    return plain + _numpy_globals()", "    return plain"),
        (
            SAFE_LOAD,
            "    plain += [argparse.Namespace, types.SimpleNamespace]",
            "    plain += [types.SimpleNamespace]",
        ),
        (
            SAFE_LOAD,
            '    plain += [(PlainDict, name) for name in ("collections.defaultdict", *ATTRIBUTE_DICTS)]',
            '    plain += [(PlainDict, "collections.defaultdict")]',
        ),
        (FORMATS, '            out[folder] = "HF Trainer checkpoint"', "            pass"),
    ],
)
def test_checkpoints_as_frameworks_save_them_load_and_the_gate_passes(
    project: Path, evidence: Evidence
) -> None:
    """Real transformers, Accelerate-style, Lightning, safetensors, numpy and torch files.

    Protection: rgt_jupyter/run/safe_load.py ``allowed``: numpy arrays and dtypes,
    ``argparse.Namespace`` and Lightning's ``AttributeDict`` (read as a plain dict) are added to
    ``weights_only``'s globals; rgt_jupyter/run/pull/formats.py ``folders`` names a Trainer
    folder. Each removed, a file of the job does not load (or its folder goes unnamed) and the
    case fails.
    """
    job = _rented(project, FORMATS_JOB, "formats")
    evidence.keep(job.spec.ckpt_dir, job.spec.out_dir)
    run = job.pull()
    verdicts = _verdicts(run.verification)
    assert run.verified, run.text()
    hf = "checkpoints/checkpoint-2/"
    acc = "checkpoints/accelerate/checkpoint_0/"
    expected = {
        hf + "model.safetensors",
        hf + "optimizer.pt",
        hf + "scheduler.pt",
        hf + "rng_state.pth",
        hf + "trainer_state.json",
        hf + "config.json",
        acc + "model.safetensors",
        acc + "optimizer.bin",
        acc + "scheduler.bin",
        acc + "random_states_0.pkl",
        "checkpoints/lightning/last.ckpt",
        "checkpoints/weights.safetensors",
        "checkpoints/args.pt",
    }
    assert expected <= set(verdicts), sorted(verdicts)
    assert {p: verdicts[p] for p in expected} == {p: "loaded" for p in expected}, run.text()
    details = {r["path"]: r["detail"] for r in run.verification["checkpoint_loads"]}
    assert details[hf + "rng_state.pth"].startswith("random number generator states")
    assert details["checkpoints/lightning/last.ckpt"].startswith("Lightning checkpoint")
    # What was done to each file is in verification.json, run.json and the text.
    files = run.verification["files"]
    assert "outputs/preds.csv" in files["hashed"] and hf + "rng_state.pth" in files["loaded"]
    kinds = {f["path"]: f["kind"] for f in files["formats"]}
    assert kinds[hf] == "HF Trainer checkpoint"
    assert kinds[acc] == "Accelerate state (save_state)"
    assert kinds["checkpoints/lightning/last.ckpt"] == "Lightning checkpoint"
    recorded = run.provenance["verification"]["files"]
    assert recorded["loaded_count"] == len(files["loaded"]) and recorded["pickled"] == []
    assert recorded["formats"] == files["formats"]
    text = run.text()
    assert "verified: yes" in text and f"{hf}: HF Trainer checkpoint" in text
    assert "load-checked (" in text and "only hashed (" in text and "DOES NOT LOAD" not in text
    gate = compute_gate(job._row, project)
    evidence.teardown(reachable=gate.passed, gate_should_pass=True)
    assert gate.passed, gate.text()
    assert gate.disclosed == []
    assert evidence.trusted(run.path, set()) == 0
    assert evidence.account(run.path) == 0


@pytest.mark.fault(
    "B-pickle",
    asserts="a Trainer folder's training_args.bin (a pickled TrainingArguments dataclass) is "
    "not loaded and stands verified by sha256 only, shown as 'pickled: not loaded, it would run "
    "code'; the run is verified with that line, the gate passes showing it, and the approval "
    "records it",
    mutation=[
        (SAFE_LOAD, '        return "pickled", named', '        return "failed", []'),
        (
            "rgt_jupyter/run/teardown.py",
            '            "disclosed": self.disclosed,\n',
            "",
        ),
    ],
)
def test_a_pickled_dataclass_is_hashed_disclosed_and_approvable(
    project: Path, evidence: Evidence
) -> None:
    """HF's ``training_args.bin`` needs ``TrainingArguments`` unpickled: outside the allowlist.

    Protection: rgt_jupyter/run/safe_load.py ``verdict_of``: a pickle that names only classes
    outside the allowlist is ``pickled`` (removed, it is a failure and the gate refuses);
    rgt_jupyter/run/teardown.py ``Gate.record`` keeps the disclosed lines with the decision
    (removed, the approval no longer says what it accepted). Each removed, the case fails.
    """
    job = _rented(project, TRAINING_ARGS_JOB, "targs")
    evidence.keep(job.spec.ckpt_dir)
    run = job.pull()
    args = "checkpoints/checkpoint-2/training_args.bin"
    loads = {r["path"]: r for r in run.verification["checkpoint_loads"]}
    assert loads[args]["verdict"] == "pickled" and not loads[args]["ok"], loads[args]
    assert loads[args]["names"][0] == "transformers.training_args.TrainingArguments"
    assert all(r["verdict"] == "loaded" for p, r in loads.items() if p != args), loads
    assert run.verified, run.text()
    said = f"pickled: not loaded, it would run code: {args}: it holds a transformers."
    assert said in run.text() and "verified by sha256 only" in run.text(), run.text()
    assert "DOES NOT LOAD" not in run.text()
    line = f"pickled: not loaded, it would run code: {args} (verified by sha256 only"
    assert run.provenance["verification"]["files"]["pickled"] == [args]
    gate = compute_gate(job._row, project)
    evidence.teardown(reachable=gate.passed, gate_should_pass=True)
    assert gate.passed, gate.text()
    assert any(line in d for d in gate.disclosed), gate.disclosed
    assert f"disclosed: {line}" in gate.text()
    record = decide(gate, "approve", project, by="test")
    assert any(line in d for d in record["gate"]["disclosed"]), record
    kept = json.loads((run.path / "run.json").read_text())["teardown"][-1]
    assert any(line in d for d in kept["gate"]["disclosed"])
    assert evidence.trusted(run.path, set()) == 0
    assert evidence.account(run.path) == 0


@pytest.mark.fault(
    "B-pickle",
    asserts="in a Trainer folder, an rng_state.pth that spawns a process, an optimizer.pt "
    "whose __reduce__ calls os.system, a scheduler.pt calling a third-party shell helper are "
    "refused (never 'pickled: not loaded') and a cut-short model.safetensors fails; no payload "
    "ran in the pull or the gate (no marker file), nothing is trusted, the gate refuses",
    mutation=[
        (
            SAFE_LOAD,
            '    if parts[0] in getattr(sys, "stdlib_module_names", ()) and parts[0] not in '
            "STDLIB_DATA_MODULES:",
            "    if False:",
        ),
        (
            SAFE_LOAD,
            '    return not all(_class_like(p) for p in qual.split("."))',
            "    return False",
        ),
        (SAFE_LOAD, "        return _safetensors(path)", '        return "safetensors"'),
        (
            SAFE_LOAD,
            'obj = torch.load(path, map_location="cpu", weights_only=True)',
            'obj = torch.load(path, map_location="cpu", weights_only=False)',
        ),
    ],
)
def test_hostile_and_damaged_checkpoints_are_refused_and_never_run(
    project: Path, evidence: Evidence
) -> None:
    """Files named as a Trainer names them, made to run code when unpickled, or cut short.

    Protection: rgt_jupyter/run/safe_load.py ``acts``: a name of the standard library outside
    its data types, or a function of any module, acts when unpickled and makes the file
    ``refused``; ``_safetensors`` reads every tensor with the safetensors library; ``_torch``
    loads with ``weights_only=True`` (with a plain load the payloads run and leave their marker
    files). Each removed, a hostile file passes as 'pickled: not loaded' or loaded (or the cut
    file as loaded) and the case fails.
    """
    sentinel = evidence.sentinel(project.parent / "beside")
    job = _rented(project, HOSTILE_JOB, "hostile")
    run = job.pull()
    hf = "checkpoints/checkpoint-2/"
    loads = {r["path"]: r for r in run.verification["checkpoint_loads"]}
    verdicts = {p: r["verdict"] for p, r in loads.items()}
    assert verdicts[hf + "rng_state.pth"] == "refused", loads[hf + "rng_state.pth"]
    assert verdicts[hf + "optimizer.pt"] == "refused", loads[hf + "optimizer.pt"]
    assert verdicts[hf + "scheduler.pt"] == "refused", loads[hf + "scheduler.pt"]
    assert verdicts[hf + "model.safetensors"] == "failed", loads[hf + "model.safetensors"]
    assert "subprocess.Popen" in loads[hf + "rng_state.pth"]["why"]
    assert "system" in loads[hf + "optimizer.pt"]["why"]
    assert "getoutput" in loads[hf + "scheduler.pt"]["why"]
    assert "cut short" in loads[hf + "model.safetensors"]["why"]
    assert not run.verified
    text = run.text()
    for name in ("rng_state.pth", "optimizer.pt", "scheduler.pt", "model.safetensors"):
        assert f"DOES NOT LOAD {hf}{name}" in text, text
    assert "pickled: not loaded" not in text
    files = run.provenance["verification"]["files"]
    assert files["refused_count"] == 3 and files["pickled"] == []
    gate = compute_gate(job._row, project)
    evidence.teardown(reachable=gate.passed, gate_should_pass=False)
    assert not gate.passed and gate.disclosed == []
    failing = " ".join(gate.reasons())
    assert "rng_state.pth" in failing and "refused" in failing, failing
    with pytest.raises(UsageError, match="the gate refuses"):
        decide(gate, "approve", project)
    # No payload ran: not in the pull's loader, not in the gate's.
    assert not list(project.rglob("PWNED*")), list(project.rglob("PWNED*"))
    corrupt = {hf + n for n in ("rng_state.pth", "optimizer.pt", "scheduler.pt")}
    corrupt.add(hf + "model.safetensors")
    assert evidence.trusted(run.path, corrupt, bytes_differ=False) == 0
    assert evidence.account(sentinel.parent) == 0
