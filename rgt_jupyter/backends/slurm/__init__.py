"""The ``sbatch`` backend: Slurm jobs and job arrays (:mod:`.launcher`), their batch script
(:mod:`.script`), Slurm's states (:mod:`.states`, :mod:`.observe`) and the batched queue
(:mod:`.queue`)."""

from .launcher import SlurmBackend

__all__ = ["SlurmBackend"]
