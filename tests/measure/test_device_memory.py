"""measure/device_memory.py: the GPU pre-check of train/profile/measure and the one-line CUDA out-of-memory error.

The CUDA queries are faked (mem_get_info, is_available), so the logic runs on CPU; the real-GPU path is in
test_cuda_pre_check_on_a_real_gpu (marked gpu).
"""

from pathlib import Path

import pytest
import torch

from runs import memory as memory_per_gpu
from trainledger.account.memory.per_gpu import CUDA_CONTEXT_BYTES, CUDA_CONTEXT_EAGER_BYTES, cuda_reserve_bytes
from trainledger.errors import TrainledgerError
from trainledger.measure import device_memory as D
from trainledger.specs import get_model

GIB = 2**30
LLAMA_1B = Path(__file__).resolve().parents[1] / "data" / "h100_2026_11_26" / "llama1b-config.json"
# PyTorch's message (c10/cuda/CUDACachingAllocator.cpp) with the figures of the recorded H100 run
RECORDED = ("CUDA out of memory. Tried to allocate 7.83 GiB. GPU 0 has a total capacity of 79.18 GiB of which 4.43 GiB "
            "is free. Including non-PyTorch memory, this process has 74.74 GiB memory in use. Of the allocated memory "
            "67.59 GiB is allocated by PyTorch, and 6.66 GiB is reserved by PyTorch but unallocated. If reserved but "
            "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html)")


def llama_peak(batch_size):
    return memory_per_gpu(get_model(str(LLAMA_1B)), batch_size=batch_size, seq_len=2048, precision="amp-bf16",
                          zero=0)["peak_bytes"]


def test_needed_bytes_is_the_peak_plus_the_reserve_without_the_context():
    """mem_get_info's free memory is read after CUDA started: the context is already out of it."""
    peak = 71.44 * GIB
    assert D.needed_bytes(peak) == pytest.approx(peak + cuda_reserve_bytes(peak, context=False)["total"])
    assert cuda_reserve_bytes(peak, context=False)["context"] == 0


def test_a_step_that_fits_passes_with_its_numbers():
    fits = D.check_cuda_fits(llama_peak, 4, mem_get_info=lambda: (78.5 * GIB, 79.18 * GIB), environ={})
    assert fits["checked"] and fits["needed_bytes"] == pytest.approx(D.needed_bytes(llama_peak(4)))
    assert fits["free_bytes"] == 78.5 * GIB and fits["total_bytes"] == 79.18 * GIB


def test_a_step_that_does_not_fit_is_one_line_with_the_numbers_and_the_largest_batch():
    free = 60 * GIB
    with pytest.raises(TrainledgerError) as error:
        D.check_cuda_fits(llama_peak, 8, mem_get_info=lambda: (free, 79.18 * GIB), environ={})
    message = str(error.value)
    assert "\n" not in message and message.startswith("--batch-size 8:")
    best = D.largest_batch(llama_peak, free, 8)
    assert D.needed_bytes(llama_peak(best)) <= free < D.needed_bytes(llama_peak(best + 1))     # the boundary
    assert f"--batch-size {best}" in message and "60 GiB" in message and "79.2 GiB" in message
    assert D.SKIP_ENV in message


def test_between_the_bare_peak_and_the_allowance_the_replay_decides():
    """Llama 1B 8 x 2048: peak 71.4 GiB, 78.7 GiB with the 10 % allowance. With 76 GiB free the allowance decides
    nothing: the replayed reservation does (74.3 GiB fits; 77 GiB would not); without a replay, a warning."""
    free = lambda: (76 * GIB, 79.18 * GIB)          # noqa: E731
    asked = []
    fits = D.check_cuda_fits(llama_peak, 8, mem_get_info=free, environ={},
                             replay=lambda b: asked.append(b) or 74.26 * GIB)
    assert asked == [8] and fits["how"] == "replay" and fits["needed_bytes"] == 74.26 * GIB
    with pytest.raises(TrainledgerError, match=r"would reserve 77 GiB .* the largest that fits is --batch-size"):
        D.check_cuda_fits(llama_peak, 8, mem_get_info=free, environ={}, replay=lambda b: 77 * GIB)
    warned = D.check_cuda_fits(llama_peak, 8, mem_get_info=free, environ={})
    assert "may run out of memory" in warned["warning"] and "\n" not in warned["warning"]


def test_check_before_run_replays_trainledgers_model_in_the_band():
    """gpt2 2 x 512: peak 2.55 GiB, 2.87 GiB with the allowance; its two steps replayed reserve 3.13 GiB (a 20 %
    cache). With 2.8 GiB free the replay, not the allowance, stops it."""
    from trainledger.measure.compare import check_gpu_memory
    with pytest.raises(TrainledgerError, match=r"would reserve 3.13 GiB for it \(its allocations replayed"):
        check_gpu_memory(get_model("gpt2"), "cuda", batch_size=2, seq_len=512, precision="amp-bf16",
                         optimizer="adamw", mem_get_info=lambda: (2.8 * GIB, 16 * GIB), environ={})


def test_when_the_bare_peak_does_not_fit_nothing_is_replayed():
    with pytest.raises(TrainledgerError, match="needs about"):
        D.check_cuda_fits(llama_peak, 8, mem_get_info=lambda: (70 * GIB, 79.18 * GIB), environ={},
                          replay=lambda b: pytest.fail("replayed a step that cannot fit"))


def test_when_even_one_sequence_does_not_fit_it_says_what_to_change():
    with pytest.raises(TrainledgerError, match="even --batch-size 1 does not fit"):
        D.check_cuda_fits(llama_peak, 8, mem_get_info=lambda: (10 * GIB, 16 * GIB), environ={})


def test_the_escape_skips_the_check():
    called = []
    result = D.check_cuda_fits(llama_peak, 8, mem_get_info=lambda: called.append(1) or (0, 0),
                               environ={D.SKIP_ENV: "1"})
    assert result == {"checked": False} and not called


def test_check_before_run_checks_only_cuda():
    assert D.check_before_run(get_model("tiny"), torch.device("cpu"), batch_size=8, seq_len=64, precision="fp32",
                              optimizer="adamw", mem_get_info=lambda: pytest.fail("asked a CPU run")) is None


def test_recorded_oom_message_becomes_one_line_with_its_numbers():
    n = D.oom_numbers(RECORDED)
    assert n == {"asked": 7.83 * GIB, "total": 79.18 * GIB, "free": 4.43 * GIB, "in_use": 74.74 * GIB,
                 "allocated": 67.59 * GIB, "unallocated": 6.66 * GIB}
    line = D.oom_message(torch.OutOfMemoryError(RECORDED), live=lambda: pytest.fail("the message had every number"))
    assert "\n" not in line
    for figure in ("7.83 GiB", "67.6 GiB", "74.2 GiB", "6.66 GiB", "4.43 GiB", "79.2 GiB", "--batch-size"):
        assert figure in line


def test_an_oom_message_without_numbers_asks_torch_cuda():
    live = {"allocated": 10 * GIB, "reserved": 12 * GIB, "free": 1 * GIB, "total": 16 * GIB}
    line = D.oom_message(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), live=lambda: live)
    assert "2 GiB more with 10 GiB allocated and 12 GiB reserved" in line and "1 GiB free of 16 GiB" in line


def test_is_cuda_oom_knows_torchs_class_only():
    assert D.is_cuda_oom(torch.OutOfMemoryError("CUDA out of memory."))
    assert not D.is_cuda_oom(MemoryError("host")) and not D.is_cuda_oom(RuntimeError("CUDA out of memory."))


def test_the_cli_prints_an_oom_as_one_line_and_exits_2(monkeypatch, capsys):
    from trainledger.cli import main as cli_main
    from trainledger.cli import params as params_cli

    def oom(args):
        raise torch.OutOfMemoryError(RECORDED)
    monkeypatch.setattr(params_cli, "compute", oom)
    monkeypatch.delenv("TRAINLEDGER_DEBUG", raising=False)
    assert cli_main.main(["params", "--model", "gpt2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: CUDA out of memory:") and err.count("\n") == 1 and "unexpected" not in err


def _pretend_cuda(monkeypatch, free_bytes):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (free_bytes, 80 * GIB))
    monkeypatch.delenv(D.SKIP_ENV, raising=False)


def test_measure_on_cuda_is_refused_before_it_allocates(monkeypatch):
    from trainledger.measure.compare import measure_model
    _pretend_cuda(monkeypatch, 40 * GIB)
    import trainledger.models as models
    monkeypatch.setattr(models, "build_model", lambda *a, **k: pytest.fail("allocated before the check"))
    with pytest.raises(TrainledgerError, match=r"--batch-size 8: one measured training step needs .* the largest"):
        measure_model(get_model(str(LLAMA_1B)), 8, 2048, precision="amp-bf16", device="cuda")


def test_train_on_cuda_is_refused_before_it_builds_the_model(monkeypatch, tmp_path):
    import numpy as np

    from trainledger.data import write_tokens
    from trainledger.train import Trainer, resolve
    from trainledger.train import distributed as dist_
    from trainledger.train import loop
    token_file = tmp_path / "tokens.bin"
    write_tokens(token_file, np.arange(20_000, dtype=np.uint16) % 50_000, dtype="uint16")
    _pretend_cuda(monkeypatch, 8 * GIB)
    monkeypatch.setattr(loop, "build_model", lambda *a, **k: pytest.fail("built before the check"))
    config = resolve({"model": "gpt2", "steps": 1, "batch_size": 64, "grad_accum": 2, "seq_len": 1024,
                      "data": str(token_file), "out_dir": str(tmp_path), "plot": False, "precision": "amp-bf16"})
    with pytest.raises(TrainledgerError, match=r"micro-batch 32: this training step .* \(raise --grad-accum\)"):
        Trainer(config, world=dist_.World(device=torch.device("cuda")), quiet=True)


def test_profile_on_cuda_is_refused_before_it_runs(monkeypatch):
    from trainledger.measure import profile
    _pretend_cuda(monkeypatch, 8 * GIB)
    monkeypatch.setattr(profile, "profile_steps", lambda *a, **k: pytest.fail("ran before the check"))
    with pytest.raises(TrainledgerError, match="a profiled training step"):
        profile.compare(get_model(str(LLAMA_1B)), None, batch_size=8, seq_len=2048, precision="amp-bf16",
                        optimizer="adamw", steps=1, device="cuda")


@pytest.mark.gpu
def test_cuda_pre_check_on_a_real_gpu():
    """On a GPU: a step that fits passes; one a thousand times larger than the device is refused in one line."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    spec = get_model("gpt2")
    fits = D.check_before_run(spec, torch.device("cuda"), batch_size=1, seq_len=128, precision="amp-bf16",
                              optimizer="adamw")
    free, total = torch.cuda.mem_get_info()
    assert fits["checked"] and fits["needed_bytes"] < free <= total
    with pytest.raises(TrainledgerError, match="the largest that fits is --batch-size"):
        D.check_before_run(spec, torch.device("cuda"), batch_size=4096, seq_len=1024, precision="amp-bf16",
                           optimizer="adamw")


@pytest.mark.gpu
def test_reserved_memory_on_a_real_gpu_matches_the_allocator_replay():
    """measure --device cuda: torch.cuda.max_memory_reserved() beside the replay of the same steps' allocations."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from trainledger.measure.compare import measure_model
    result = measure_model(get_model("gpt2"), 4, 512, precision="amp-bf16", device="cuda")
    replayed = result["details"]["allocator_replay"]["peak_reserved_bytes"]
    assert result["measured"]["reserved_bytes"] == pytest.approx(replayed, rel=0.1)
    assert result["measured"]["reserved_bytes"] >= result["measured"]["later_step_peak_bytes"]


def test_the_cuda_context_is_what_the_recorded_h100_training_process_held_outside_the_allocator():
    """The recorded H100 out-of-memory error (tests/data/h100_2026_11_26, PyTorch 2.11 + CUDA 13.0, lazy module
    loading: PyTorch's default since pytorch/pytorch PR #86509) came in the second step, after a whole first step
    had loaded its kernels: in use by the process minus PyTorch's reserved memory (allocated + cached; the cuBLAS
    workspaces are allocated through the caching allocator) is the context. It lies between the lazy context at
    start-up (287,047,680 B) and every module loaded (666,632,192 B), both measured in PR #86509."""
    parsed = D.oom_numbers(RECORDED)
    outside_allocator = parsed["in_use"] - parsed["allocated"] - parsed["unallocated"]
    assert CUDA_CONTEXT_BYTES == pytest.approx(outside_allocator, abs=0.015 * 2**30)   # the message's rounding
    assert 287_047_680 < CUDA_CONTEXT_BYTES < CUDA_CONTEXT_EAGER_BYTES == 666_632_192
