"""measure.memory: live storages by category, on real tensors, fake tensors and CUDA."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from trainledger.measure.memory import LiveTracker, storage_bytes, track_step
from trainledger.models import Cruncher, Transformer
from trainledger.specs import get_model


def test_lecture_toy_optimizer_example_is_496_bytes():
    # CS336 Lecture 2 (optimizer): B=2, D=4, 2 layers: 36 params, 16 activations, 36 grads, 36 states
    # (AdaGrad's sum), all fp32: 4·(36 + 16 + 36 + 36) = 496 bytes.
    model = Cruncher(4, 2)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.01)
    report = track_step(model, (torch.ones(2, 4),), optimizer, loss_fn=lambda m, b: m(*b).pow(2).mean())
    n_params = sum(p.numel() for p in model.parameters())
    hidden_activations = report.activations_bytes - 2 * 4        # minus the (B,) output the loss squares
    assert n_params == 36
    assert hidden_activations == 16 * 4
    assert report.grads_bytes == 36 * 4
    # torch's Adagrad also keeps a 4-byte step counter per parameter tensor (3 tensors)
    assert report.optimizer_bytes - 3 * 4 == 36 * 4
    assert report.params_bytes + hidden_activations + report.grads_bytes + report.optimizer_bytes - 12 == 496


def test_views_count_once_and_frees_are_seen():
    tracker = LiveTracker()
    with tracker:
        a = torch.ones(256)
        b = a[10:]                       # a view: no new storage
        c = a * 2
        assert tracker.live_bytes == 2 * 256 * 4
        del c
        assert tracker.live_bytes == 256 * 4
    assert tracker.peak_bytes == 2 * 256 * 4
    assert storage_bytes([a, b, a.t() if a.dim() == 2 else a]) == 256 * 4


def test_fake_step_categories():
    spec = get_model("tiny")
    with FakeTensorMode():
        model = Transformer(spec)
        idx = torch.randint(0, spec.vocab_size, (2, 64))
        report = track_step(model, (idx, idx), torch.optim.AdamW(model.parameters()), count_flops=True)
    n_params = 858_880
    assert report.params_bytes == 4 * n_params
    assert report.grads_bytes == 4 * n_params
    assert report.optimizer_bytes == 8 * n_params + 4 * len(list(model.parameters()))   # + step counters
    assert report.activations_bytes == report.saved_bytes
    assert report.peak_bytes > report.params_bytes + report.activations_bytes
    assert report.forward_flops > 0 and report.backward_flops == 2 * report.forward_flops


def test_fake_and_real_agree():
    spec = get_model("tiny").with_(n_layers=2)
    torch.manual_seed(0)
    real = track_step(Transformer(spec), (torch.randint(0, 256, (2, 32)),) * 2)
    with FakeTensorMode():
        fake = track_step(Transformer(spec), (torch.randint(0, 256, (2, 32)),) * 2)
    assert (fake.activations_bytes, fake.peak_bytes) == (real.activations_bytes, real.peak_bytes)


@pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
def test_every_dense_family_fake_equals_real_and_runs_on_meta(dense_family_spec, dtype, one_torch_thread):
    # masks, soft-capping, Gemma's embedding scale and partial RoPE all work on fake and meta tensors
    spec = dense_family_spec
    torch.manual_seed(0)
    real = track_step(Transformer(spec, dtype=dtype), (torch.randint(0, spec.vocab_size, (2, 24)),) * 2)
    with FakeTensorMode():
        fake = track_step(Transformer(spec, dtype=dtype), (torch.randint(0, spec.vocab_size, (2, 24)),) * 2)
    assert (fake.activations_bytes, fake.peak_bytes) == (real.activations_bytes, real.peak_bytes)
    with torch.device("meta"):
        logits = Transformer(spec, dtype=dtype)(torch.zeros(2, 24, dtype=torch.long))
    assert logits.shape == (2, 24, spec.vocab_size) and logits.is_meta


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; the same tracker is checked on CPU and fake tensors above")
def test_cuda_peak_matches_allocator():
    spec = get_model("gpt2").with_(n_layers=2)
    model = Transformer(spec, device="cuda")
    idx = torch.randint(0, spec.vocab_size, (4, 512), device="cuda")
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    report = track_step(model, (idx, idx), optimizer)
    torch.cuda.synchronize()
    assert report.peak_bytes == pytest.approx(torch.cuda.max_memory_allocated(), rel=0.05)


def test_gradient_accumulation_holds_the_grads_through_the_next_micro_batch():
    """Two micro-batches per step without zero_grad between them (as `train --grad-accum 2` runs): the second
    micro-batch's forward and backward run beside the first one's gradients. account.memory.per_gpu's peak with
    grad_accum=2 is the tracked peak of the first and of a later step, on fake tensors."""
    import torch

    from runs import memory as memory_per_gpu
    from trainledger.measure.compare import _fake_mode
    from trainledger.measure.memory import LiveTracker, storage_bytes
    from trainledger.models import build_model
    from trainledger.optim import build_optimizer
    from trainledger.specs import get_model

    spec = get_model("gpt2")
    with _fake_mode():
        model = build_model(spec)
        opt = build_optimizer("adamw", list(model.parameters()), lr=1e-4)
        x = torch.zeros(2, 256, dtype=torch.long)
        peaks = []
        for _ in range(2):
            states = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
            base = storage_bytes(list(model.parameters())) + storage_bytes(states)
            tracker = LiveTracker()
            with tracker:
                for _ in range(2):
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        loss = model(x, x)[1]
                    loss.backward()
                    del loss
                opt.step()
                opt.zero_grad(set_to_none=True)
            peaks.append(base + tracker.peak_bytes)
    m = memory_per_gpu(spec, batch_size=2, seq_len=256, precision="amp-bf16", zero=0, grad_accum=2)
    assert m["first_step_peak_bytes"] == pytest.approx(peaks[0], rel=1e-5)
    assert m["peak_bytes"] == pytest.approx(peaks[1], rel=1e-5)
    single = memory_per_gpu(spec, batch_size=2, seq_len=256, precision="amp-bf16", zero=0)
    assert m["peak_bytes"] > single["peak_bytes"]
