"""Profiles of billed machines whose jobs run on this machine, for tests of what a meter and a
teardown gate do without a platform to rent from."""

from __future__ import annotations

#: The lines that make a profile's jobs run here, in folders under the project.
ON_THIS_MACHINE = """\
transport = "local"
python = ""
workdir = "{project}/.rgt/local/jobs"
durable_dir = "{project}/.rgt/local/durable"
scratch_dir = "{project}/.rgt/local/scratch"
smoke_default = false
"""

#: RunPod's facts (no Network Volume declared: checkpoints on the container disk do not survive).
POD_ON_THIS_MACHINE = 'extends = "runpod"\n' + ON_THIS_MACHINE

#: RunPod with a Network Volume where the durable dir is, everything else the container disk.
POD = (
    POD_ON_THIS_MACHINE
    + """\
features = ["network_volume"]

[[tiers]]
path = "/"
label = "container disk"
survives_stop = false
survives_destroy = false

[[tiers]]
path = "{project}/.rgt/local/durable"
label = "Network Volume"
needs = "network_volume"
survives_stop = true
survives_destroy = true
"""
)

#: A machine that bills (the ``ssh`` profile's meter and gate).
RENTED = 'extends = "ssh"\nname = "rented"\n' + ON_THIS_MACHINE
