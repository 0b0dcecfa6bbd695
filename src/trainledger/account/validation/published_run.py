"""A published training run as a value: what ran (model, GPUs, the run's settings), what was published, where, and
what we assumed; one evaluation shared by every validation table. Pure.

Each table of account/validation transcribes its source's rows as printed (tuples, column by column, so the
transcription can be checked against the source) and turns each row into a `PublishedRun`: the model (a preset
name, or a model built from the paper's shapes), the GPU and GPU count, the run (specs.run.Run: only what the
source states or we assume, the rest left to the defaults `trainledger step` decides, as a user asks it), the
published figure the table compares (`metric`, `published`), any further printed figures, and the assumptions
made where the source is silent. `evaluate(case)` predicts the run with account.time.step.step_time and gives the
error predicted / published − 1 of that figure. A case is data: `command(case)` is the `trainledger step`
command that asks it (None when the run has a setting no flag reaches, such as Megatron-LM's dropout), and
`document(case)` its run file (specs/run_file.py; `model_config(case)` the config.json of a model built here), so
a user can save a published run, re-ask it, and change one setting.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from trainledger.account.time.step import step_time
from trainledger.specs import run_file, run_table
from trainledger.specs.hardware import get_gpu
from trainledger.specs.model import TransformerSpec
from trainledger.specs.run import Hardware, Run

# What a table compares, read from step_time's answer for a case (the published figure is in the same unit):
# the step (seconds per iteration), the model FLOPs utilisation, tokens/s per GPU or of all, GPU-hours of `tokens` tokens.
METRICS = {
    "seconds": lambda r, case: r["step_seconds"],
    "mfu": lambda r, case: r["mfu"],
    "tokens_per_s_per_gpu": lambda r, case: r["tokens_per_s"] / case.num_gpus,
    "tokens_per_s": lambda r, case: r["tokens_per_s"],
    "gpu_hours": lambda r, case: case.tokens / r["tokens_per_s"] * case.num_gpus / 3600,
}


@dataclass(frozen=True)
class PublishedRun:
    """One published run (module docstring). `model`: a preset name (`trainledger models`) or a TransformerSpec
    built from the source's shapes; `gpu`: a `trainledger hardware` name; `metric`: a key of METRICS, `published`
    its value as published (or as derived from what was printed: the derivation in the table's docstring);
    `figures`: further printed columns as (name, value) pairs; `tokens`: the tokens trained (metric gpu_hours)."""

    label: str
    source: str
    model: str | TransformerSpec
    gpu: str
    num_gpus: int
    run: Run
    metric: str
    published: float
    figures: tuple = ()
    assumptions: tuple = ()
    tokens: float | None = None

    def __post_init__(self):
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r} of {self.label!r} (known: {', '.join(METRICS)})")
        if not isinstance(self.run, Run):
            raise ValueError(f"{self.label!r}: run must be a specs.run.Run")

    def figure(self, name: str):
        """A printed figure by name (KeyError when the row has none)."""
        return dict(self.figures)[name]

    @property
    def spec(self) -> TransformerSpec:
        """The model: the preset of that name, or the spec the case holds."""
        if isinstance(self.model, TransformerSpec):
            return self.model
        from trainledger.specs import get_model
        return get_model(self.model)

    @property
    def model_name(self) -> str:
        """What `--model` takes for this case: the preset name, or the config.json `model_config` writes."""
        return self.model if isinstance(self.model, str) else f"{self.model.name}.json"


def run_of(**fields_by_name) -> Run:
    """The run of a published row from field names (specs.run.Run.with_: tp=8, recompute="full", ...)."""
    return Run().with_(**fields_by_name)


def evaluate(case: PublishedRun, *, with_memory: bool = True) -> dict:
    """{"published_<metric>", "predicted_<metric>", "error", "step"}: the case predicted by account.time.step.step_time
    on its GPUs (`with_memory`: with the memory per GPU and whether it fits), the error predicted / published − 1,
    and step_time's whole answer."""
    r = step_time(case.spec, Hardware(get_gpu(case.gpu), case.num_gpus), case.run, with_memory=with_memory)
    predicted = METRICS[case.metric](r, case)
    return {f"published_{case.metric}": case.published, f"predicted_{case.metric}": predicted,
            "error": predicted / case.published - 1, "step": r}


# ----- the case as a user asks it: the command, the run file, the model's config.json ------------------------------
def _value_at(value, path: str):
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _words(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def unflagged(run: Run) -> list[str]:
    """The paths of the settings of `run` that differ from their default and that no flag sets (file-only fields
    of specs/run.py, such as kernels.dropout): a command cannot ask them, a run file can."""
    default, flagged = Run(), {s.path for s in run_table.settings()}
    return [path for path in run_table.fields_by_path()
            if path not in flagged and _value_at(run, path) != _value_at(default, path)]


def flags(run: Run, command: str = "step") -> list[str]:
    """The flags that ask `run` of `command` (specs.run_table.for_command): every setting that differs from the run's
    default (specs/run.py), as its flag and value, an on/off switch as --x or --no-x; --framework first (whose
    kernels run, which decides other defaults), then the table's order."""
    default, out = Run(), []
    settings = sorted(run_table.for_command(command), key=lambda s: s.flag != "--framework")
    for s in settings:
        value, base = _value_at(run, s.path), _value_at(default, s.path)
        if value == base:
            continue
        kind = s.kind.rstrip("?")
        if kind == "flag":
            if value:
                out.append(s.flag)
        elif kind == "switch":
            out.append(s.flag if value else f"--no-{s.flag[2:]}")
        else:
            out += [s.flag, _words(value)]
    return out


def command(case: PublishedRun) -> str | None:
    """The `trainledger step` command that asks `case` (the model as `model_name`: for a model built here, the
    config.json of `model_config`), or None when the run has a setting no flag reaches (`unflagged`: ask it with
    its run file, `document`)."""
    if unflagged(case.run):
        return None
    words = ["trainledger", "step", "--model", case.model_name, "--gpu", case.gpu, "--num-gpus", str(case.num_gpus)]
    return shlex.join(words + flags(case.run))


def document(case: PublishedRun) -> dict:
    """The run file of `case` (specs.run_file.document: `trainledger step --config FILE` asks it)."""
    return run_file.document({"name": case.model_name}, {"gpu": case.gpu, "num_gpus": case.num_gpus}, case.run)


def model_config(case: PublishedRun) -> dict | None:
    """The Hugging Face config.json of a model built from a paper's shapes (None for a preset): Megatron-LM's GPT is
    GPT-2's architecture (learned positions, LayerNorm with biases, a GeLU MLP, biases, tied embeddings), so a
    `gpt2` config of its sizes reads back (specs/hf_config.py) as the same model. Other shapes: a ValueError."""
    spec = case.model
    if isinstance(spec, str):
        return None
    gpt2 = dict(position="learned", norm="layernorm", norm_bias=True, mlp="gelu", qkv_bias=True, attn_out_bias=True,
                mlp_bias=True)
    if any(getattr(spec, name) != value for name, value in gpt2.items()) or spec.is_moe:
        raise ValueError(f"{spec.name}: no config.json writer for this architecture")
    return {"model_type": "gpt2", "vocab_size": spec.vocab_size, "n_embd": spec.d_model, "n_layer": spec.n_layers,
            "n_head": spec.n_heads, "n_inner": spec.d_ff, "n_positions": spec.max_seq_len,
            "activation_function": "gelu", "layer_norm_epsilon": spec.norm_eps,
            "tie_word_embeddings": spec.tied_embeddings}
