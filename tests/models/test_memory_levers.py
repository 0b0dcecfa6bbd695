"""The activation levers of models/: the chunked cross-entropy (torchtune's CEWithChunkedOutputLoss) and activation
offloading (save_on_cpu's semantics) compute what the plain step computes, and hold less on the device."""

from __future__ import annotations

import pytest
import torch

from trainledger.models import Transformer
from trainledger.models.offload import ActivationOffload
from trainledger.specs import get_model


def _model(**changes):
    torch.manual_seed(0)
    return Transformer(get_model("tiny").with_(**changes))


def _loss_and_grads(model, idx, targets):
    model.zero_grad(set_to_none=True)
    _, loss = model(idx, targets)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("chunks", [2, 4, 7])          # 7 does not divide the 40 positions: uneven chunks
@pytest.mark.parametrize("tied", [True, False])
def test_chunked_cross_entropy_is_the_mean_cross_entropy(chunks, tied):
    model = _model(tied_embeddings=tied, final_softcap=30.0)
    idx, targets = torch.randint(0, 256, (3, 40)), torch.randint(0, 256, (3, 40))
    loss, grads = _loss_and_grads(model, idx, targets)
    model.loss_chunks = chunks
    logits, chunked = model(idx, targets)
    assert logits is None                               # the whole logits are never made
    chunked_loss, chunked_grads = _loss_and_grads(model, idx, targets)
    torch.testing.assert_close(chunked_loss, loss, rtol=1e-6, atol=0)     # the summation order alone differs
    for name, grad in grads.items():
        torch.testing.assert_close(chunked_grads[name], grad, rtol=1e-5, atol=1e-7)
    with torch.no_grad():                               # inference keeps the whole logits
        assert model(idx).shape == (3, 40, 256)


def test_activation_offload_gives_identical_losses_and_gradients_and_moves_the_saved_bytes():
    model = _model()
    idx, targets = torch.randint(0, 256, (4, 32)), torch.randint(0, 256, (4, 32))
    loss, grads = _loss_and_grads(model, idx, targets)
    offload = ActivationOffload(model)
    model.zero_grad(set_to_none=True)
    with offload:
        _, offloaded = model(idx, targets)
    held = offload.host_live_bytes
    offloaded.backward()
    assert torch.equal(offloaded.detach(), loss)                       # bit for bit: values copied, not changed
    assert all(torch.equal(p.grad, grads[n]) for n, p in model.named_parameters())
    # what autograd saved in the forward went to the host copies: at least the attention inputs and the MLP's
    # hidden activations of every layer (B·T·d_ff fp32 each)
    assert held >= 4 * 4 * 32 * 512 * 4 and offload.offloaded_tensors > 0
    del offloaded
    assert offload.host_live_bytes == 0 and offload.host_peak_bytes == held   # freed by backward


def test_activation_offload_leaves_parameters_in_place():
    model = _model()
    saved = []
    offload = ActivationOffload(model)
    with offload:
        inner = offload._pack
        offload_pack = lambda t: saved.append(inner(t)) or saved[-1]  # noqa: E731
        with torch.autograd.graph.saved_tensors_hooks(offload_pack, offload._unpack):
            _, loss = model(torch.randint(0, 256, (1, 8)), torch.randint(0, 256, (1, 8)))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = [s for s in saved if isinstance(s, torch.Tensor)]
    assert kept and all(t.untyped_storage().data_ptr() in params or t.numel() < 8 * 256 for t in kept)
