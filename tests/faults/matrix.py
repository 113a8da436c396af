"""The fault and bad-input matrix: every case the suite must cover, with the fault it injects.

A test claims a case with ``@pytest.mark.fault(CASE, asserts="...")``; several tests may share
one case (the same fault at several places). ``bench/results/faults.json`` is written only by a
session that ran every case listed here.
"""

from __future__ import annotations

MATRIX: dict[str, str] = {
    # 1. connection cuts
    "F1-push-cut": "connection cut mid-push",
    "F1-pull-cut": "connection cut mid-pull (10/50/99 %)",
    "F1-watch-cut": "connection cut mid-watch and mid-run",
    "F1-launch-cut": "connection cut between launch and the job id coming back",
    "F1-batched-cut": "connection cut in the middle of the one stream of a many-file pull",
    "F1-parallel-cut": "one of several parallel streams of a large file's pull cut",
    # 2. stalls
    "F2-stall": "a stall with no RST (the peer goes silent, nothing is closed)",
    # 3. the remote side going away
    "F3-sshd-restart": "sshd restarted while a job runs",
    "F3-reboot": "the remote host rebooted in effect (agent and job killed)",
    # 4. signals
    "F4-sigterm": "SIGTERM to a running job (preemption)",
    "F4-sigkill": "SIGKILL to the job or its agent",
    # 5. kills at the worst moment
    "F5-ckpt-kill": "kill during a checkpoint write",
    "F5-pull-rename-kill": "kill during a pull's rename",
    "F5-registry-kill": "kill during a registry write",
    # 6. local disk
    "F6-disk-upfront": "local disk too small for the manifest (bytes, inodes)",
    "F6-disk-midway": "local disk or inodes running out during a pull",
    # 7. remote disk
    "F7-remote-disk-full": "remote disk full during save_checkpoint",
    # 8. sources that change
    "F8-altered": "a pulled file truncated or bit-flipped after the manifest",
    "F8-growing": "a pulled file still growing during the pull",
    # 9. the disk refusing a write
    "F9-fsync-eio": "fsync failing with EIO",
    # 10. the kernel going away
    "F10-kernel-watch": "kernel restart during watch",
    "F10-kernel-pull": "kernel restart during pull",
    # 11. hosts that disagree
    "F11-host-key": "host key changed",
    "F11-clock-skew": "clock skew of +/-1 h between the hosts",
    # 12. the gate
    "F12-late-checkpoint": "a new checkpoint appearing after verification",
    # 13. the object-storage tier
    "F13-bucket-credentials": "bucket credentials wrong or unknown",
    "F13-bucket-refuses-writes": "a bucket that refuses writes (read-only credentials)",
    "F13-upload-kill": "SIGKILL mid-upload of a checkpoint; objects without or against records",
    # 14. rented machines that go away
    "F14-observe-outage": "the platform unreachable when asked whether a machine is gone",
    "F14-replacement-no-boot": "a replacement machine that does not boot",
    # records that must not lie, under kills, races and damage
    "R1-agent-killed": "SIGKILL of the agent alone, its job's process living on",
    "R2-name-race": "several processes launching one name at the same moment",
    "R3-registry-damaged": "an empty, truncated or garbage registry file",
    "R4-pull-race": "two pulls of one job at once",
    "R5-secrets": "secrets in the agent's environment, or left behind by a killed agent",
    "R6-host-away": "one SSH host unreachable among several",
    "R7-facts": "facts in the view: the disk used, disk vs inodes, NaN at exit 0, a stale "
    "heartbeat, resuming a bug, confirming a stop the gate refuses",
    "R8-store-race": "pushes taking files from one remote store at the same moment; a job "
    "writing into its pushed input while the store makes a spare of it",
    # bad inputs
    "B-manifest": "hostile manifests (../, absolute, symlinks out, NUL, duplicate or case-colliding)",
    "B-manifest-size": "manifests claiming 10 TB or listing 1e6 entries",
    "B-names": "hostile job names and paths",
    "B-logs": "non-UTF-8, ANSI-laden, \\r-heavy and 100 MB single-line logs",
    "B-status": "a malformed or hostile status.json (claims of 'verified')",
    "B-profiles": "malformed profiles",
    "B-pickle": "checkpoints as frameworks save them (HF Trainer and Accelerate folders, "
    "Lightning .ckpt, safetensors whole or cut short, numpy RNG state, Namespace, a pickled "
    "dataclass) and pickled checkpoints that would run code on a plain torch.load",
    "B-notebooks": "notebooks with malformed JSON or outputs",
    "B-properties": "generated inputs (hypothesis): manifests, names, command lines, numbers",
}
