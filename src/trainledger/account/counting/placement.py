"""Where parameters sit before any sharding of model states: per GPU under pipeline and tensor parallelism, and
what ZeRO divides each state by. Pure, no torch; the bottom of account/ that memory, time and planning share.

1. Pipeline parallel `pp` (Narayanan et al. 2021, arXiv:2104.04473): the layers are split into pp stages of
   ceil(L/pp) layers; the first stage also holds the token (and position) embeddings, the last the final norm
   and LM head (a tied head keeps a copy of the embedding there, as Megatron-LM does). The heaviest stage is
   reported.
2. Tensor parallel `tp` (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053): q/k/v/o, MLP and expert matrices and
   their column-parallel biases, the vocabulary-parallel token embedding and LM head are divided by tp; norms,
   position embeddings, row-parallel biases (o, MLP down) and the MoE router are replicated.
3. Expert parallel `ep` (account.counting.experts): the routed experts are divided by etp·ep instead of tp (etp,
   expert tensor parallelism, default tp; MoE Parallel Folding lets it differ).
4. ZeRO over `dp` ranks (Rajbhandari et al. 2019, arXiv:1910.02054, Sec. 3.1): `zero_divisors`.
"""

from __future__ import annotations

from trainledger.specs.run_checks import check_positive_int, check_parallel  # noqa: F401 (moved to specs: the run's checks)

from trainledger.account.counting.experts import routed_expert_params
from trainledger.account.counting.params import norm_params, param_counts
from trainledger.specs.model import CruncherSpec
from trainledger.specs.run_checks import pipeline_stage_layers

ZERO_STAGES = (0, 1, 2, 3)

def params_per_gpu(spec, tp: int = 1, pp: int = 1, ep: int = 1, etp: int | None = None,
                   split: tuple = (False, False)) -> dict:
    """Parameters (a count) one GPU holds before ZeRO: the heaviest pipeline stage, tensor-parallel parts divided by tp,
    the routed experts' by etp·ep (expert tensor- and expert-parallel sizes; etp None: tp). `split`: (embedding, loss)
    counted as layers of the pipeline split (Megatron's --account-for-*-in-pipeline-split: the first stage holds one
    layer fewer beside the embedding, the last one fewer beside the head, a middle stage the (L + extras)/pp layers;
    specs.run_checks.pipeline_stage_layers).

    Returns {"n_params_per_gpu", "stage", "layers_per_stage", "sharded", "replicated", "expert_params_per_gpu"}.
    """
    counts = param_counts(spec)
    if isinstance(spec, CruncherSpec):
        return {"n_params_per_gpu": counts["n_params"], "stage": "all", "layers_per_stage": spec.n_layers,
                "sharded": 0, "replicated": counts["n_params"], "expert_params_per_gpu": 0.0}
    c, L, d = counts["components"], spec.n_layers, spec.d_model
    # biases of row-parallel matrices (o_proj, every MLP `down`: each expert's, the shared expert's) stay whole
    downs = sum(count * (spec.n_experts + (1 if spec.shared_expert_d_ff else 0) if spec.is_moe_layer(i) else 1)
                for i, count in spec.layer_groups())
    row_biases = L * (d if spec.attn_out_bias else 0) + (downs * d if spec.mlp_bias else 0)
    replicated_per_layer = (c["norms"] - norm_params(spec) + row_biases + c["router"]) / L
    sharded_per_layer = (c["attention"] + c["mlp"] - row_biases) / L
    # the routed experts' tensor-parallel parts per layer, of which this GPU keeps 1/(etp·ep) (their few down biases
    # are left replicated: < 0.01 % of gpt-oss-120b); `sharded` is divided by tp below, so they count tp/(etp·ep)
    etp = tp if etp is None else etp
    expert_down_biases = spec.n_moe_layers * spec.n_experts * d if spec.mlp_bias else 0
    experts_per_layer = (routed_expert_params(spec) - expert_down_biases) / L
    sharded_per_layer -= experts_per_layer * (1 - tp / (etp * ep))
    counts = pipeline_stage_layers(L, pp, *split)
    per_stage = counts["most"]
    embedding = c["token_embedding"]
    head = embedding if spec.tied_embeddings else c["lm_head"]
    first, last = counts["first"], counts["last"]
    stages = {
        "first": (first * sharded_per_layer + embedding, first * replicated_per_layer + c["position_embedding"]),
        "last": (last * sharded_per_layer + head, last * replicated_per_layer + norm_params(spec)),
    }
    if any(split) and pp > 2:
        stages["middle"] = (per_stage * sharded_per_layer, per_stage * replicated_per_layer)
    if pp == 1:
        stages = {"all": (L * sharded_per_layer + embedding + c["lm_head"],
                          L * replicated_per_layer + c["position_embedding"] + norm_params(spec))}
    name, (sharded, replicated) = max(stages.items(), key=lambda item: item[1][0] / tp + item[1][1])
    layers = L if pp == 1 else counts[name]
    return {"n_params_per_gpu": sharded / tp + replicated, "stage": name, "layers_per_stage": per_stage,
            "sharded": sharded, "replicated": replicated, "expert_params_per_gpu": layers * experts_per_layer / (etp * ep)}


def zero_divisors(zero: int, dp: int) -> dict:
    """What each model state is divided by under ZeRO stage `zero` over `dp` ranks (ZeRO Sec. 3.1)."""
    return {"params": dp if zero >= 3 else 1, "grads": dp if zero >= 2 else 1,
            "master_params": dp if zero >= 1 else 1, "optimizer": dp if zero >= 1 else 1}
