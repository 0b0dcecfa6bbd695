"""`trainledger generate`: text from a trained model, with the measured speed beside account/time/inference.py's prediction.

Steps: load the model (train/run_model.py) and its tokenizer, encode the prompt, warm up once (the first call
of a shape pays one-time costs: oneDNN primitive creation, CUDA context and kernels), then generate with or
without the KV cache (models/generation.py) and time prefill and decoding. The prediction is
account.inference.inference for the same model, prompt length, new tokens, dtype and batch 1 on this machine's
calibrated device (`bench --calibrate`; measured once and cached, as `step --gpu cpu` does).
"""

from __future__ import annotations

import os
import sys

from trainledger.errors import TrainledgerError

DTYPE_NAMES = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}


def parse_prompt_ids(text: str) -> list[int]:
    """'1,2,3' or '1 2 3' -> [1, 2, 3]; a one-line error naming --prompt-ids for anything else."""
    words = [w for w in text.replace(",", " ").split() if w]
    if not words:
        raise TrainledgerError("--prompt-ids is empty: give token ids like 1,2,3")
    ids = []
    for word in words:
        if not word.lstrip("-").isdigit():
            raise TrainledgerError(f"--prompt-ids must be integers separated by commas, got {word[:20]!r}")
        ids.append(int(word))
    return ids


def tokenizer_of(loaded):
    """The tokenizer the model was trained with: the run's (trainledger.data.run_tokenizer: bytes unless the run
    recorded another), or a Hugging Face directory's tokenizer.json; None when there is none (then --prompt-ids)."""
    from trainledger.data import ByteTokenizer, load_tokenizer, run_tokenizer
    if loaded.hf_dir is not None:
        path = loaded.hf_dir / "tokenizer.json"
        if path.is_file():
            return load_tokenizer(path, "RUN_OR_CHECKPOINT")
        return ByteTokenizer() if loaded.spec.vocab_size == ByteTokenizer.vocab_size else None
    return run_tokenizer(loaded.config)


def _name(tokenizer) -> str:
    return tokenizer.name


def prompt_tokens(loaded, tokenizer, prompt: str | None, prompt_ids: str | None, allowed_special=()) -> list[int]:
    """The prompt as token ids, checked against the model's vocabulary. A special token's string in --prompt is
    ordinary text unless `allowed_special` (--allow-special: names, or "all") names it, as tiktoken encodes."""
    if (prompt is None) == (prompt_ids is None):
        raise TrainledgerError("give the prompt as --prompt TEXT or as --prompt-ids 1,2,3 (one of them)")
    vocab = loaded.spec.vocab_size
    if prompt_ids is not None:
        ids = parse_prompt_ids(prompt_ids)
        bad = [i for i in ids if not 0 <= i < vocab]
        if bad:
            raise TrainledgerError(f"--prompt-ids: id {bad[0]} is not in the vocabulary of model '{loaded.spec.name}' "
                                   f"(ids 0..{vocab - 1})")
        return ids
    if tokenizer is None:
        raise TrainledgerError(f"{loaded.source} has no tokenizer file to encode --prompt with; give --prompt-ids")
    if prompt == "":
        raise TrainledgerError("the prompt is empty (--prompt): give some text")
    allowed = ("all" if "all" in allowed_special else tuple(allowed_special)) if allowed_special else None
    if allowed and not getattr(tokenizer, "special_tokens", None):
        raise TrainledgerError(f"--allow-special: the tokenizer ({_name(tokenizer)}) has no special tokens")
    ids = [int(i) for i in (tokenizer.encode(prompt, allowed_special=allowed) if allowed else tokenizer.encode(prompt))]
    if any(i >= vocab for i in ids):
        raise TrainledgerError(f"--prompt: the tokenizer ({_name(tokenizer)}) gives ids up to {max(ids)}, beyond the "
                               f"vocabulary of model '{loaded.spec.name}' ({vocab})")
    return ids


def decode_text(tokenizer, ids: list[int], warnings: list[str]) -> str | None:
    """The text of `ids` (None without a tokenizer); ids the tokenizer lacks are dropped with a warning."""
    if tokenizer is None:
        return None
    size = tokenizer.vocab_size
    known = [i for i in ids if i < size]
    if len(known) < len(ids):
        warnings.append(f"{len(ids) - len(known)} generated id(s) beyond the tokenizer's {size} tokens (padding rows of "
                        "the vocabulary) are left out of the text")
    return tokenizer.decode(known)


def run(path, *, prompt: str | None = None, prompt_ids: str | None = None, max_new_tokens: int = 64,
        temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None, seed: int = 0,
        device: str = "cpu", use_cache: bool = True, predict: bool = True, log=None, allowed_special=()) -> dict:
    """Generates from the model at `path` and returns the measured and predicted numbers (module docstring)."""
    import torch

    from trainledger.models.generation import check_lengths, generate
    from trainledger.models.sampling import check_sampling
    from trainledger.train.run_model import load_model
    check_sampling(temperature, top_k, top_p)
    if device not in ("cpu", "cuda"):
        raise TrainledgerError(f"--device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainledgerError("--device cuda: no CUDA device is available here; use --device cpu")
    loaded = load_model(path, device)
    tokenizer = tokenizer_of(loaded)
    ids = prompt_tokens(loaded, tokenizer, prompt, prompt_ids, allowed_special)
    check_lengths(loaded.spec, len(ids), max_new_tokens)
    model = loaded.model
    prompt_tensor = torch.tensor([ids], dtype=torch.long, device=device)
    settings = dict(temperature=temperature, top_k=top_k, top_p=top_p, use_cache=use_cache)
    generate(model, prompt_tensor, min(2, max_new_tokens), generator=torch.Generator(device).manual_seed(seed),
             **settings)                                            # warm-up, not timed
    result = generate(model, prompt_tensor, max_new_tokens, generator=torch.Generator(device).manual_seed(seed),
                      **settings)
    warnings: list[str] = []
    tokens = result.tokens[0]
    dtype = DTYPE_NAMES.get(str(next(model.parameters()).dtype), "fp32")
    out = {
        "text": decode_text(tokenizer, tokens, warnings), "tokens": tokens, "prompt_tokens": ids,
        "prompt_text": decode_text(tokenizer, ids, []) if prompt is None else prompt,
        "prompt_len": len(ids), "n_new_tokens": len(tokens), "model": loaded.spec.name, "source": str(loaded.source),
        "step": loaded.step, "tokenizer": _name(tokenizer) if tokenizer is not None else None, "device": device,
        "dtype": dtype, "cache": use_cache, "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed,
        "threads": torch.get_num_threads(), "prefill_seconds": result.prefill_seconds,
        "decode_seconds": result.decode_seconds, "decode_steps": result.decode_steps,
        "prefill_tokens_per_s": len(ids) / result.prefill_seconds,
        "decode_tokens_per_s": result.decode_steps / result.decode_seconds if result.decode_steps else None,
        "kv_cache_bytes": result.kv_cache_bytes,
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    out.update(predict_speed(loaded.spec, device, dtype, len(ids), max_new_tokens, use_cache, temperature == 0, warnings,
                             log) if predict else _no_prediction())
    out["warnings"] = warnings
    return out


def _no_prediction() -> dict:
    return {"predicted_prefill_tokens_per_s": None, "predicted_decode_tokens_per_s": None,
            "predicted_kv_cache_bytes": None, "assumptions": []}


def predict_speed(spec, device: str, dtype: str, prompt_len: int, max_new_tokens: int, use_cache: bool, greedy: bool,
                  warnings: list[str], log=None) -> dict:
    """account.time.inference's prediction for this generation on this machine's calibrated `device` (batch 1)."""
    from trainledger.account.time.inference import InferenceRequest, inference
    from trainledger.measure.calibrate import calibrated_device
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    gpu = calibrated_device(device, log=say)
    try:
        predicted = inference(spec, gpu, InferenceRequest(batch_size=1, prompt_len=prompt_len, gen_len=max_new_tokens,
                                                          dtype=dtype, cache=use_cache, greedy=greedy))
    except TrainledgerError as error:
        warnings.append(f"no prediction: {error}")
        return _no_prediction()
    if getattr(gpu, "decode_op_overhead_seconds", None) is None and gpu.op_overhead_seconds:
        warnings.append("this machine's calibration predates the decoding overhead measurement: predicted with the "
                        "training one; run `trainledger bench --calibrate` to measure it")
    return {"predicted_prefill_tokens_per_s": predicted["prefill_tokens_per_s"],
            "predicted_decode_tokens_per_s": predicted["tokens_per_s"],
            "predicted_kv_cache_bytes": predicted["kv_cache_bytes"], "predicted_bottleneck": predicted["bottleneck"],
            "predicted_decode_ops": predicted["decode_ops"],
            "assumptions": [line for line in predicted["assumptions"] if not line.startswith("the largest batch")]}
