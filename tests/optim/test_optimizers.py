"""Each trainledger optimizer against its torch.optim counterpart (the independent reference), 100 steps.

Two copies of a small MLP start from the same weights and see the same batches; one is trained by torch.optim,
the other by ours. Halfway (step 50) our optimizer is serialized (torch.save → BytesIO → torch.load with
weights_only=True) and loaded into a fresh instance, which finishes the run: the weights must agree to 1e-6.
"""

import copy
import io

import pytest
import torch
import torch.nn.functional as F

from trainledger.errors import TrainledgerError
from trainledger.optim import OPTIMIZERS, SGD, AdaGrad, Adam, AdamW, LectureAdaGrad, RMSProp, build_optimizer

STEPS = 100
RESTORE_AT = 50

# (ours, torch's, kwargs) with the hyperparameter each case exercises as its id.
CASES = [
    pytest.param(SGD, torch.optim.SGD, dict(lr=0.05), id="sgd-plain"),
    pytest.param(SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9), id="sgd-momentum"),
    pytest.param(SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.5), id="sgd-dampening"),
    pytest.param(SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True), id="sgd-nesterov"),
    pytest.param(SGD, torch.optim.SGD, dict(lr=0.05, weight_decay=0.1), id="sgd-weight_decay"),
    pytest.param(SGD, torch.optim.SGD, dict(lr=0.01, momentum=0.5, maximize=True), id="sgd-maximize"),
    pytest.param(SGD, torch.optim.SGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01), id="sgd-all"),
    pytest.param(AdaGrad, torch.optim.Adagrad, dict(), id="adagrad-defaults"),
    pytest.param(AdaGrad, torch.optim.Adagrad, dict(lr=0.05, lr_decay=0.01), id="adagrad-lr_decay"),
    pytest.param(AdaGrad, torch.optim.Adagrad, dict(initial_accumulator_value=0.1), id="adagrad-initial_accumulator_value"),
    pytest.param(AdaGrad, torch.optim.Adagrad, dict(weight_decay=0.1), id="adagrad-weight_decay"),
    pytest.param(AdaGrad, torch.optim.Adagrad, dict(eps=1e-3), id="adagrad-eps"),
    pytest.param(AdaGrad, torch.optim.Adagrad, dict(maximize=True, lr=1e-3), id="adagrad-maximize"),
    pytest.param(RMSProp, torch.optim.RMSprop, dict(lr=1e-3), id="rmsprop-defaults"),
    pytest.param(RMSProp, torch.optim.RMSprop, dict(lr=1e-3, alpha=0.9), id="rmsprop-alpha"),
    pytest.param(RMSProp, torch.optim.RMSprop, dict(lr=1e-3, eps=1e-3), id="rmsprop-eps"),
    pytest.param(RMSProp, torch.optim.RMSprop, dict(lr=1e-3, momentum=0.9), id="rmsprop-momentum"),
    pytest.param(RMSProp, torch.optim.RMSprop, dict(lr=1e-3, centered=True), id="rmsprop-centered"),
    pytest.param(RMSProp, torch.optim.RMSprop, dict(lr=1e-3, centered=True, momentum=0.5), id="rmsprop-centered-momentum"),
    pytest.param(RMSProp, torch.optim.RMSprop, dict(lr=1e-3, weight_decay=0.1), id="rmsprop-weight_decay"),
    pytest.param(RMSProp, torch.optim.RMSprop, dict(lr=1e-4, maximize=True), id="rmsprop-maximize"),
    pytest.param(Adam, torch.optim.Adam, dict(), id="adam-defaults"),
    pytest.param(Adam, torch.optim.Adam, dict(lr=1e-2), id="adam-lr"),
    pytest.param(Adam, torch.optim.Adam, dict(betas=(0.8, 0.95)), id="adam-betas"),
    pytest.param(Adam, torch.optim.Adam, dict(eps=1e-4), id="adam-eps"),
    pytest.param(Adam, torch.optim.Adam, dict(weight_decay=0.1), id="adam-weight_decay"),
    pytest.param(Adam, torch.optim.Adam, dict(amsgrad=True), id="adam-amsgrad"),
    pytest.param(Adam, torch.optim.Adam, dict(maximize=True, lr=1e-4), id="adam-maximize"),
    pytest.param(AdamW, torch.optim.AdamW, dict(), id="adamw-defaults"),
    pytest.param(AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1), id="adamw-weight_decay"),
    pytest.param(AdamW, torch.optim.AdamW, dict(weight_decay=0.0), id="adamw-no-weight_decay"),
    pytest.param(AdamW, torch.optim.AdamW, dict(betas=(0.9, 0.95), eps=1e-6), id="adamw-betas-eps"),
    pytest.param(AdamW, torch.optim.AdamW, dict(amsgrad=True, weight_decay=0.05), id="adamw-amsgrad"),
    pytest.param(AdamW, torch.optim.AdamW, dict(maximize=True, lr=1e-4), id="adamw-maximize"),
    # a second (or third) setting of each hyperparameter, far from the first
    pytest.param(SGD, torch.optim.SGD, dict(lr=0.2, momentum=0.3, dampening=0.9), id="sgd-lr-dampening-2"),
    pytest.param(SGD, torch.optim.SGD, dict(lr=0.02, momentum=0.99, nesterov=True, weight_decay=0.5), id="sgd-nesterov-2"),
    pytest.param(AdaGrad, torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.5, initial_accumulator_value=2.0,
                                                    weight_decay=0.01, eps=1e-6), id="adagrad-all-2"),
    pytest.param(RMSProp, torch.optim.RMSprop, dict(lr=3e-3, alpha=0.5, eps=1e-6, momentum=0.2, centered=True,
                                                    weight_decay=0.01), id="rmsprop-all-2"),
    pytest.param(Adam, torch.optim.Adam, dict(lr=3e-3, betas=(0.5, 0.9), eps=1e-6, weight_decay=0.01, amsgrad=True),
                 id="adam-all-2"),
    pytest.param(AdamW, torch.optim.AdamW, dict(lr=3e-3, betas=(0.0, 0.99), eps=1e-10, weight_decay=1.0), id="adamw-all-2"),
]


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    model.unused = torch.nn.Parameter(torch.ones(3))  # never gets a gradient: must be skipped, left as is
    return model


def batches(steps: int):
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(16, 8, generator=generator)
        yield x, torch.sin(x[:, :4]) + 0.1 * torch.randn(16, 4, generator=generator)


def train_step(model, optimizer, x, y) -> None:
    optimizer.zero_grad(set_to_none=True)
    F.mse_loss(model(x), y).backward()
    optimizer.step()


def roundtrip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("ours_cls, torch_cls, kwargs", CASES)
def test_matches_torch_over_100_steps_with_a_restore(ours_cls, torch_cls, kwargs):
    reference_model = make_model()
    model = copy.deepcopy(reference_model)
    reference = torch_cls(reference_model.parameters(), **kwargs)
    ours = ours_cls(model.parameters(), **kwargs)
    for step, (x, y) in enumerate(batches(STEPS)):
        if step == RESTORE_AT:
            fresh = ours_cls(model.parameters(), **kwargs)
            fresh.load_state_dict(roundtrip(ours.state_dict()))
            ours = fresh
        train_step(reference_model, reference, x, y)
        train_step(model, ours, x, y)
    moved = False
    for (name, expected), actual, start in zip(reference_model.named_parameters(), model.parameters(),
                                               make_model().parameters()):
        torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-7, msg=lambda m: f"{name}: {m}")
        moved |= not torch.equal(actual, start)
    assert moved, "the optimizer did not change any weight"
    assert torch.equal(model.unused, torch.ones(3))


@pytest.mark.parametrize("ours_cls, torch_cls, kwargs", [CASES[1], CASES[11], CASES[18], CASES[26], CASES[29]],
                         ids=["sgd", "adagrad", "rmsprop", "adam", "adamw"])
def test_state_names_match_torch_so_checkpoints_are_interchangeable(ours_cls, torch_cls, kwargs):
    """torch's state_dict after 3 steps loads into ours (and ours into torch's) and both continue identically."""
    model_a, model_b = make_model(), make_model()
    reference = torch_cls(model_a.parameters(), **kwargs)
    data = list(batches(6))
    for x, y in data[:3]:
        train_step(model_a, reference, x, y)
    model_b.load_state_dict(model_a.state_dict())
    ours = ours_cls(model_b.parameters(), **kwargs)
    ours.load_state_dict(roundtrip(reference.state_dict()))
    for x, y in data[3:]:
        train_step(model_a, reference, x, y)
        train_step(model_b, ours, x, y)
    for a, b in zip(model_a.parameters(), model_b.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)
    back = torch_cls(make_model().parameters(), **kwargs)
    back.load_state_dict(roundtrip(ours.state_dict()))
    expected = reference.state_dict()["state"]
    assert back.state_dict()["state"].keys() == expected.keys()
    assert all(set(back.state_dict()["state"][k]) == set(expected[k]) for k in expected)


def test_param_groups_with_their_own_lr_match_torch():
    model_a, model_b = make_model(), make_model()
    groups = lambda m: [{"params": m[0].parameters(), "lr": 1e-2}, {"params": m[2].parameters(), "weight_decay": 0.2}]
    reference, ours = torch.optim.AdamW(groups(model_a), lr=1e-3), AdamW(groups(model_b), lr=1e-3)
    for x, y in batches(20):
        train_step(model_a, reference, x, y)
        train_step(model_b, ours, x, y)
    for a, b in zip(model_a.parameters(), model_b.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


def test_lecture_adagrad_puts_eps_inside_the_root():
    """LectureAdaGrad follows the lecture's formula p -= lr·g/√(Σg² + 1e-5), written out here step by step."""
    model, copy_model = make_model(), make_model()
    optimizer = LectureAdaGrad(model.parameters(), lr=0.01)
    g2 = [torch.zeros_like(p) for p in copy_model.parameters()]
    for x, y in batches(10):
        train_step(model, optimizer, x, y)
        copy_model.zero_grad(set_to_none=True)
        F.mse_loss(copy_model(x), y).backward()
        with torch.no_grad():
            for p, s in zip(copy_model.parameters(), g2):
                if p.grad is not None:
                    s += p.grad ** 2
                    p -= 0.01 * p.grad / torch.sqrt(s + 1e-5)
    for a, b in zip(copy_model.parameters(), model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-7)


def test_lecture_adagrad_differs_from_torch_adagrad_where_eps_matters():
    p_lecture, p_torch = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    lecture, reference = LectureAdaGrad([p_lecture], lr=0.01), torch.optim.Adagrad([p_torch], lr=0.01)
    for p, opt in ((p_lecture, lecture), (p_torch, reference)):
        p.grad = torch.tensor([1e-3])
        opt.step()
    # lecture: 0.01·1e-3/√(1e-6 + 1e-5) = 3.015e-3; torch: 0.01·1e-3/(1e-3 + 1e-10) = 1e-2
    assert p_lecture.item() == pytest.approx(-0.01 * 1e-3 / (1.1e-5) ** 0.5, rel=1e-5)
    assert p_torch.item() == pytest.approx(-0.01, rel=1e-5)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_build_optimizer_by_name(name):
    optimizer = build_optimizer(name, make_model().parameters(), lr=0.02)
    assert optimizer.param_groups[0]["lr"] == 0.02
    assert isinstance(optimizer, OPTIMIZERS[name][0])
    if name == "momentum":
        assert optimizer.param_groups[0]["momentum"] == 0.9


def test_build_optimizer_errors_list_the_names():
    with pytest.raises(TrainledgerError, match="Known: sgd, momentum, adagrad, rmsprop, rmsprop-centered, adam, adamw"):
        build_optimizer("lion", make_model().parameters(), lr=1e-3)
    with pytest.raises(TrainledgerError, match="adamw"):
        build_optimizer("adamw", make_model().parameters(), lr=1e-3, momentum=0.9)


@pytest.mark.parametrize("cls, kwargs", [
    (Adam, dict(lr=-1.0)), (AdamW, dict(betas=(0.9, 1.0))), (SGD, dict(nesterov=True)),
    (RMSProp, dict(alpha=1.5)), (AdaGrad, dict(eps=-1e-10)),
], ids=["negative-lr", "beta2=1", "nesterov-without-momentum", "alpha>1", "negative-eps"])
def test_invalid_hyperparameters_raise(cls, kwargs):
    with pytest.raises(TrainledgerError):
        cls(make_model().parameters(), **kwargs)


def test_closure_loss_is_returned():
    model = make_model()
    optimizer = AdamW(model.parameters())
    x, y = next(batches(1))

    def closure():
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        return loss

    assert optimizer.step(closure).item() == pytest.approx(F.mse_loss(make_model()(x), y).item(), rel=1e-6)
