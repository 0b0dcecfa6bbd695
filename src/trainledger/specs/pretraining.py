"""Published pre-training recipes: the peak learning rate, warmup and final learning rate of a model's own paper, by
size, for the training settings of `layout --launch` (account/planning/launch_settings.py). Data only, with sources.

- Llama 3 (Llama Team, "The Llama 3 Herd of Models", arXiv:2407.21783): Table 3 gives the peak learning rate of each
  size (8B 3e-4, 70B 1.5e-4, 405B 8e-5); Sec. 3.4.1 gives 405B's schedule: a linear warmup of 8,000 steps and a
  cosine decay to 8e-7 (1 % of the peak) at a batch of 4M tokens, later 8M and 16M. The paper states no other
  warmup or final rate, so 405B's are used for every size (said so in the source line).
- Llama 2 (Touvron et al. 2023, arXiv:2307.09288): Table 1 (7B and 13B 3e-4; 34B and 70B 1.5e-4) and Sec. 2.2: a
  warmup of 2,000 steps, a cosine decay to 10 % of the peak, a global batch of 4M tokens.
- DeepSeek-V3 (DeepSeek-AI 2024, arXiv:2412.19437, Sec. 4.2): 2.2e-4 reached linearly over the first 2K steps and
  decayed (cosine) to 2.2e-5 (10 %); `train` runs warmup + cosine without the report's constant phase.
- GPT-3 (Brown et al. 2020, arXiv:2005.14165): Table 2.1 gives the learning rate and batch of eight sizes (125M to
  175B); Appendix B: a linear warmup over the first 375M tokens and a cosine decay to 10 % of the peak. Every model
  without a recipe of its own takes the row nearest in size (in log parameters; for a mixture of experts, in
  active parameters, the width a token sees).
- The length of a run: Chinchilla's compute-optimal 20 tokens per parameter (Hoffmann et al. 2022,
  arXiv:2203.15556, Table 3), as account/planning/plan.py's `chinchilla-20`.
"""

from __future__ import annotations

from dataclasses import dataclass

CHINCHILLA_TOKENS_PER_PARAM = 20.0      # Hoffmann et al. 2022, Table 3 (about 20 tokens per parameter)


@dataclass(frozen=True)
class Recipe:
    """One published pre-training run's optimizer schedule. Units: a learning rate per step; tokens; steps."""

    family: str                 # the preset names it applies to start with this ("llama-3", ...); "" for GPT-3's rule
    label: str                  # "Llama 3 70B"
    params: float               # its parameter count (the row's size)
    lr: float                   # peak learning rate
    final_lr_fraction: float    # the learning rate at the end of the cosine, as a fraction of the peak
    warmup_steps: int | None    # linear warmup in steps, or
    warmup_tokens: float | None  # in tokens (GPT-3)
    batch_tokens: float         # the global batch the rate was tuned at, tokens
    lr_source: str              # where the peak learning rate is stated
    schedule_source: str        # where the warmup and the final rate are stated


_LLAMA3 = "Llama 3 (arXiv:2407.21783) Sec. 3.4.1, stated for 405B (the paper states no other size's)"
_LLAMA2 = "Llama 2 (arXiv:2307.09288) Sec. 2.2"
_GPT3 = "GPT-3 (arXiv:2005.14165) App. B"
_DEEPSEEK = "DeepSeek-V3 (arXiv:2412.19437) Sec. 4.2 (2.2e-4 to 2.2e-5)"


def _llama3(size: str, params: float, lr: float) -> Recipe:
    return Recipe("llama-3", f"Llama 3 {size}", params, lr, 0.01, 8000, None, 4e6,
                  f"Llama 3 (arXiv:2407.21783) Table 3, the {size} model's peak", _LLAMA3)


def _llama2(size: str, params: float, lr: float) -> Recipe:
    return Recipe("llama-2", f"Llama 2 {size}", params, lr, 0.1, 2000, None, 4e6,
                  f"Llama 2 (arXiv:2307.09288) Table 1, the {size} model's peak", _LLAMA2)


def _gpt3(size: str, params: float, lr: float, batch_tokens: float) -> Recipe:
    return Recipe("", f"GPT-3 {size}", params, lr, 0.1, None, 375e6, batch_tokens,
                  f"GPT-3 (arXiv:2005.14165) Table 2.1, the {size} model's", _GPT3)


RECIPES: tuple[Recipe, ...] = (
    _llama3("8B", 8.03e9, 3e-4), _llama3("70B", 70.6e9, 1.5e-4), _llama3("405B", 406e9, 8e-5),
    _llama2("7B", 6.74e9, 3e-4), _llama2("13B", 13.0e9, 3e-4), _llama2("34B", 34e9, 1.5e-4),
    _llama2("70B", 69e9, 1.5e-4),
    Recipe("deepseek-v3", "DeepSeek-V3", 671e9, 2.2e-4, 0.1, 2000, None, 15360 * 4096,
           "DeepSeek-V3 (arXiv:2412.19437) Sec. 4.2, after its 2K-step warmup", _DEEPSEEK),
    _gpt3("125M", 125e6, 6.0e-4, 0.5e6), _gpt3("350M", 350e6, 3.0e-4, 0.5e6), _gpt3("760M", 760e6, 2.5e-4, 0.5e6),
    _gpt3("1.3B", 1.3e9, 2.0e-4, 1e6), _gpt3("2.7B", 2.7e9, 1.6e-4, 1e6), _gpt3("6.7B", 6.7e9, 1.2e-4, 2e6),
    _gpt3("13B", 13.0e9, 1.0e-4, 2e6), _gpt3("175B", 175.0e9, 0.6e-4, 3.2e6),
)
