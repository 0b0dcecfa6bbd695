"""The model follows the tokenizer: its vocabulary (embedding rows, LM-head columns) is the tokenizer's, padded
to a multiple with --vocab-multiple, and the padding's cost is counted by trainledger.account.

Padding the vocabulary to a multiple of 64 is nanoGPT's choice (GPT-2's 50,257 tokens become 50,304: "nearest
multiple of 64 for efficiency", model.py GPTConfig): the LM-head matmul of width vocab_size then tiles evenly on
tensor cores. The padded rows are never a target (no token id reaches them); they cost parameters, optimizer
state and LM-head FLOPs, which `padding_cost` reports from the same formulas as every other prediction.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace

from trainledger.account.counting.flops import flops_per_step
from trainledger.account.counting.params import n_params
from trainledger.errors import TrainledgerError
from trainledger.specs import PRESET_ALIASES, PRESETS, get_model


def padded(vocab_size: int, multiple: int) -> int:
    """`vocab_size` rounded up to a multiple of `multiple` (nanoGPT: 50,257 -> 50,304 with 64)."""
    if not isinstance(multiple, int) or multiple < 1:
        raise TrainledgerError(f"--vocab-multiple must be a positive integer, got {multiple!r}")
    return -(-vocab_size // multiple) * multiple


def follow_tokenizer(spec, tokenizer_vocab: int | None, multiple: int = 1):
    """(spec with the model's vocabulary, that vocabulary) for a tokenizer of `tokenizer_vocab` ids.

    None (a token file that records no tokenizer, and no --tokenizer) keeps the preset's vocabulary, padded.
    """
    vocab = tokenizer_vocab if tokenizer_vocab is not None else spec.vocab_size
    model_vocab = padded(vocab, multiple)
    return (spec if model_vocab == spec.vocab_size else replace(spec, vocab_size=model_vocab)), model_vocab


def padding_cost(spec, tokenizer_vocab: int, batch_size: int, seq_len: int) -> dict:
    """{'rows', 'params', 'params_fraction', 'train_flops_per_step', 'flops_fraction'}: what the padded rows of
    `spec` (whose vocab_size is the padded one) add over a model of `tokenizer_vocab`, from account/."""
    unpadded = replace(spec, vocab_size=tokenizer_vocab)
    params_full, params_base = n_params(spec), n_params(unpadded)
    flops_full = flops_per_step(spec, batch_size, seq_len)["train_flops_per_step"]
    flops_base = flops_per_step(unpadded, batch_size, seq_len)["train_flops_per_step"]
    return {"rows": spec.vocab_size - tokenizer_vocab, "params": params_full - params_base,
            "params_fraction": (params_full - params_base) / params_base,
            "train_flops_per_step": flops_full - flops_base, "flops_fraction": (flops_full - flops_base) / flops_base}


def model_sha256(model: str) -> str | None:
    """Hex sha256 of the spec a --model config.json describes (canonical JSON of its fields), None for a preset:
    a run records it, so that a config.json edited after training is refused, not silently loaded."""
    if str(model).strip().lower() in PRESETS or str(model).strip().lower() in PRESET_ALIASES:
        return None
    spec = get_model(model)
    # `family` names the modules (LoRA targets), no weight or shape: never in the hash
    fields = {k: v for k, v in asdict(spec).items() if k != "family" and LATER_FIELDS.get(k, object()) != v}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


# TransformerSpec fields added after runs recorded model_sha256: left out of the hash at their default, so that a
# run trained before keeps its own hash (and resumes) while a config that sets them differently is another model.
LATER_FIELDS = {"rope_layout": "half", "parallel_shared_norm": False, "lm_head_bias": False}


def run_spec(config):
    """The TransformerSpec a run trained: its --model with the vocabulary it recorded (a TrainConfig or a
    checkpoint's config dict); the preset's vocabulary for runs that recorded none. A --model config.json whose
    spec is no longer the one recorded (model_sha256) is a TrainledgerError."""
    values = config if isinstance(config, dict) else vars(config)
    spec = get_model(values["model"])
    recorded = values.get("model_sha256")
    if recorded and model_sha256(values["model"]) != recorded:
        raise TrainledgerError(f"{values['model']} has changed since the run was trained (its spec's sha256 was "
                               f"{recorded[:12]}…); restore the config.json the run was trained with")
    model_vocab = values.get("model_vocab_size")
    return replace(spec, vocab_size=model_vocab) if model_vocab and model_vocab != spec.vocab_size else spec


def vocabulary_line(data, spec, preset_vocab_size: int, config) -> str:
    """The model's vocabulary, where it comes from, and what --vocab-multiple's padding costs (the trainer's log)."""
    from trainledger import units
    model_vocab = spec.vocab_size
    if data.vocab_size is None:
        line = f"vocabulary {model_vocab:,} of model {spec.name} ({data.flag} {data.path} records no tokenizer)"
        return line + (f", padded from {preset_vocab_size:,} by --vocab-multiple {config.vocab_multiple}"
                       if model_vocab != preset_vocab_size else "")
    line = (f"vocabulary {data.vocab_size:,} from tokenizer {data.tokenizer_name} (sha256 {data.tokenizer_sha256[:12]}…)"
            + (f"; model preset {preset_vocab_size:,}" if preset_vocab_size != data.vocab_size else ""))
    if model_vocab == data.vocab_size:
        return line
    cost = padding_cost(spec, data.vocab_size, config.batch_size, config.seq_len)
    return (f"{line}; padded to {model_vocab:,} by --vocab-multiple {config.vocab_multiple}: +{cost['rows']} rows "
            f"= +{units.format_count(cost['params'])} parameters ({cost['params_fraction']:+.2%}), "
            f"+{units.format_flops(cost['train_flops_per_step'])} FLOPs per step ({cost['flops_fraction']:+.2%})")


def data_summary(data, spec, config) -> dict:
    """The data and vocabulary entries of a language-model run's summary."""
    summary = {"tokenizer": data.tokenizer_name, "tokenizer_sha256": data.tokenizer_sha256,
               "tokenizer_vocab_size": data.vocab_size, "model_vocab_size": spec.vocab_size,
               "data_path": str(data.path), "n_tokens": len(data.tokens), "held_out_tokens": data.n_held_out,
               "held_out_start": len(data.tokens) - data.n_held_out, "held_out": data.describe_split()}
    if data.vocab_size is not None and spec.vocab_size != data.vocab_size:
        cost = padding_cost(spec, data.vocab_size, config.batch_size, config.seq_len)
        summary.update(vocab_padding_params=cost["params"], vocab_padding_train_flops_per_step=cost["train_flops_per_step"])
    return summary
