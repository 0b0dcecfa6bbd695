"""No layout is listed above the GPU's memory minus the reserve (issue: memory headroom in the layout search).

Every returned layout is re-checked with account.memory.per_gpu.memory_per_gpu for its own settings: its step's peak plus
the reserve (--reserve, or the CUDA default: context, cuBLAS workspaces, the caching allocator's cache) fits the
memory, and `near_limit` marks exactly those within account.planning.layout.NEAR_LIMIT_FRACTION of it.
"""

import pytest

from trainledger.account.memory import per_gpu as M
from trainledger.account.memory.fsdp import fsdp_settings
from runs import layouts
from trainledger.account.planning.layout import NEAR_LIMIT_FRACTION
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu
from trainledger.specs.recipes import get_recipe
from runs import memory as memory_per_gpu

CASES = [  # (model, gpu, GPUs, global batch, seq len, reserve): None = the device's default
    ("gpt2", "h100", 8, 64, 1024, None),
    ("llama-2-7b", "h100", 8, 32, 4096, None),
    ("llama-2-7b", "a100-40gb", 16, 32, 4096, 4 * 2**30),
    ("mistral-7b", "h100", 8, 16, 8192, None),
    ("gemma-2-2b", "l4", 8, 8, 4096, None),
    ("qwen1.5-moe-a2.7b", "h100", 8, 16, 4096, 0.0),
]


@pytest.mark.parametrize("model, gpu_name, num_gpus, global_batch, seq_len, reserve", CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_no_pick_above_memory_minus_reserve(model, gpu_name, num_gpus, global_batch, seq_len, reserve):
    spec, gpu = get_model(model), get_gpu(gpu_name)
    found = layouts(spec, gpu, num_gpus=num_gpus, global_batch_size=global_batch, seq_len=seq_len, top=50,
                   reserve_bytes=reserve)
    assert found["layouts"]
    for layout in found["layouts"]:
        fsdp = (fsdp_settings(get_recipe("amp-bf16"), param_dtype="auto", pp=layout["pp"], dp=layout["dp"])
                if layout["zero"] == 3 else None)        # ZeRO-3 layouts are FSDP2 as it runs (account.memory.fsdp)
        m = memory_per_gpu(spec, batch_size=layout["batch_size"], seq_len=seq_len // layout["cp"], zero=layout["zero"],
                             dp=layout["dp"], tp=layout["tp"], pp=layout["pp"], sp=layout["sp"],
                             recompute=layout["recompute"], precision="amp-bf16", optimizer="adamw",
                             grad_accum=layout["micro_batches"], fsdp=fsdp, ep=layout["ep"], cp=layout["cp"],
                             etp=layout["etp"],
                             reserve_bytes=M.default_reserve(gpu) if reserve is None else reserve)
        assert layout["memory_bytes"] == pytest.approx(m["peak_bytes"])
        assert layout["reserve_bytes"] == pytest.approx(m["reserve_bytes"])
        if reserve is None:    # the CUDA default: context + workspaces + 10 % of this layout's peak
            assert layout["reserve_bytes"] == pytest.approx(M.cuda_reserve_bytes(m["peak_bytes"])["total"])
        else:
            assert layout["reserve_bytes"] == reserve
        assert layout["memory_bytes"] + layout["reserve_bytes"] <= gpu.memory_bytes
        assert layout["near_limit"] == (gpu.memory_bytes - m["peak_bytes"] - m["reserve_bytes"]
                                        < NEAR_LIMIT_FRACTION * gpu.memory_bytes)


def test_a_larger_reserve_drops_the_picks_it_no_longer_leaves_room_for():
    spec, gpu = get_model("llama-2-7b"), get_gpu("h100")
    kwargs = dict(num_gpus=8, global_batch_size=32, seq_len=4096, top=1000)
    loose = layouts(spec, gpu, reserve_bytes=0.0, **kwargs)
    tight = layouts(spec, gpu, reserve_bytes=20e9, **kwargs)
    assert tight["fitting"] < loose["fitting"]
    assert all(layout["memory_bytes"] + 20e9 <= gpu.memory_bytes for layout in tight["layouts"])
    assert any(layout["memory_bytes"] + 20e9 > gpu.memory_bytes for layout in loose["layouts"])


def test_tpus_get_no_cuda_reserve_by_default():
    assert M.default_reserve(get_gpu("h100")) is None and M.default_reserve(get_gpu("mi300x")) is None
    assert M.default_reserve(get_gpu("tpu-v5p")) == 0.0


@pytest.mark.parametrize("argv", [
    ["step", "--model", "gpt2", "--num-gpus", "1", "--batch-size", "8", "--reserve", "67.5GiB", "--json"],
    ["layout", "--model", "gpt2", "--num-gpus", "1", "--global-batch-size", "8", "--reserve", "67.5GiB", "--json"],
], ids=["step", "layout"])
def test_a_pick_within_5_percent_of_the_limit_gets_one_warning_line(argv, capsys):
    """gpt2 8 x 1024 peaks at 9.08 GiB; with 67.5 GiB reserved on an H100 (79.18 GiB reported), 2.6 GiB (3.3 %) are
    left."""
    import json

    from trainledger.cli import main as cli_main
    assert cli_main.main(argv) == 0
    out = capsys.readouterr()
    warnings = [line for line in out.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "to spare" in warnings[0]
    result = json.loads(out.out)
    pick = result["layouts"][0] if "layouts" in result else result
    assert pick["memory_bytes"] + pick["reserve_bytes"] <= get_gpu("h100").memory_bytes
    assert get_gpu("h100").memory_bytes - pick["memory_bytes"] - pick["reserve_bytes"] < NEAR_LIMIT_FRACTION * get_gpu("h100").memory_bytes
