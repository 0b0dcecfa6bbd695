"""A published run asked of the model: step_time of its settings on its GPUs. Pure.

Each table of account/validation gives a published run's settings by their field names in specs/run.py (`tp`,
`recompute`, `overlap`, ...): `step_of` builds the run (specs.run.Run) and times it, ZeRO 0 where the table names
no stage (how the tables were first asked; Megatron-LM without the distributed optimizer).
"""

from __future__ import annotations

from trainledger.account.time.step import step_time
from trainledger.specs.run import Hardware, Run


def run_of(**fields) -> Run:
    """The run of a published row: `fields` by name (specs.run.Run.with_), ZeRO 0 unless given."""
    return Run().with_(**{"zero": 0, **fields})


def step_of(spec, gpu, num_gpus: int, *, with_memory: bool = True, **fields) -> dict:
    """account.time.step.step_time of the published run `fields` (run_of) of `spec` on `num_gpus` × `gpu`."""
    return step_time(spec, Hardware(gpu, num_gpus), run_of(**fields), with_memory=with_memory)
