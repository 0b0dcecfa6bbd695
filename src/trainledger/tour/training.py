"""Tour sections on the training loop: randomness, data loading, an optimizer step, the loop, checkpoints.

Follows CS336 Lecture 2 (Spring 2025), `note_about_randomness`, `data_loading`, `optimizer`,
`train_loop` and `checkpointing`, with trainledger's primitives (`trainledger.data`, `trainledger.optim`,
`trainledger.models`, `trainledger.train.checkpoint`). The optimizer example is accounted by
`trainledger.account` and measured by `trainledger.measure` (tracked memory by category, FlopCounterMode).
"""

from __future__ import annotations

from trainledger.tour.runner import Section, Tour

# optimizer (B=2, D=4, num_layers=2): num_parameters 36, num_activations 16, num_gradients 36,
# num_optimizer_states 36, total_memory 4·(36+16+36+36) = 496 bytes, flops = 6·B·num_parameters = 432 (facts.md)
LECTURE_OPTIMIZER = {"params": 36, "activations": 16, "grads": 36, "optimizer_states": 36, "bytes": 496, "flops": 432}
FP32_BYTES = 4


def randomness(tour: Tour) -> None:
    import random

    import numpy as np
    import torch

    from trainledger.data import seed_everything
    from trainledger.models import Cruncher

    def draws(seed):
        seed_everything(seed)
        return torch.randn(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]

    first, again, other = draws(0), draws(0), draws(1)
    tour.inspect("seed 0: torch, numpy, random", first)
    with tour.claim("seeding torch, numpy and random (data.seed_everything) reproduces all three streams") as c:
        c.check(first == again, first=first, again=again)
    with tour.claim("a different seed gives different draws in each of the three") as c:
        c.check(all(a != b for a, b in zip(first, other)), seed_1=other)
    with tour.claim("with the seed fixed, model initialization is reproducible") as c:
        seed_everything(0)
        a = Cruncher(dim=16, num_layers=2).state_dict()
        seed_everything(0)
        b = Cruncher(dim=16, num_layers=2).state_dict()
        c.check(all(torch.equal(a[k], b[k]) for k in a), tensors=list(a))


def data_loading(tour: Tour) -> None:
    import numpy as np
    import torch

    from trainledger.data import get_batch, open_tokens, write_tokens

    orig_data = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], dtype=np.int32)
    raw = tour.workdir / "data.npy"
    orig_data.tofile(raw)
    with tour.claim("the lecture's round trip: tofile, then np.memmap reads the same ten int32 tokens lazily") as c:
        data = np.memmap(raw, dtype=np.int32, mode="r")
        c.check(np.array_equal(data, orig_data) and isinstance(data, np.memmap), data=data)
    with tour.claim("data.open_tokens reads the lecture's headerless file as a memmap when given its dtype") as c:
        data = open_tokens(raw, dtype="int32")
        c.check(np.array_equal(data, orig_data) and isinstance(data, np.memmap), data=data)
    with tour.claim("data.write_tokens + open_tokens round-trip through a self-describing token file") as c:
        path = write_tokens(tour.workdir / "data.tokens", orig_data)
        data = open_tokens(path)
        tour.inspect("open_tokens(data.tokens)", data)
        c.check(np.array_equal(data, orig_data) and isinstance(data, np.memmap), data=data, dtype=str(data.dtype))

    B, L = 2, 4
    x, y = get_batch(data, batch_size=B, context_length=L, device=tour.device,
                     generator=np.random.default_rng(0))
    tour.inspect("x", x)
    tour.inspect("y", y)
    with tour.claim("get_batch returns x AND y, both [B, L] = [2, 4] int64 on the chosen device") as c:
        c.check(x.shape == y.shape == torch.Size([B, L]) and x.dtype == y.dtype == torch.int64
                and x.device.type == tour.device, x_shape=x.shape, y_shape=y.shape, dtype=x.dtype)
    with tour.claim("y is x shifted by one token: y[b, t] is the token after x[b, t] in the data") as c:
        starts = [int(np.flatnonzero(orig_data == int(row[0]))[0]) for row in x.cpu()]
        expected = torch.tensor(np.stack([orig_data[s + 1:s + 1 + L] for s in starts]))
        c.check(torch.equal(y.cpu(), expected) and torch.equal(y[:, :-1], x[:, 1:]), starts=starts)
    with tour.claim("the same generator seed gives the same batch") as c:
        x2, y2 = get_batch(data, batch_size=B, context_length=L, device=tour.device, generator=np.random.default_rng(0))
        c.check(torch.equal(x, x2) and torch.equal(y, y2))
    tour.note("the lecture's get_batch returns only x (its targets are never built); trainledger's returns (x, y) "
              "with y = x shifted by one, drawing windows of L + 1 tokens")


def optimizer(tour: Tour) -> None:
    import torch
    import torch.nn.functional as F

    from trainledger.account.counting.flops import flops_per_step
    from trainledger.account.memory.per_gpu import memory_per_gpu
    from trainledger.measure.flops import count_step_flops
    from trainledger.measure.memory import track_step
    from trainledger.models import Cruncher
    from trainledger.optim import AdaGrad, LectureAdaGrad
    from trainledger.specs.model import CruncherSpec

    B, D, num_layers = 2, 4, 2
    torch.manual_seed(0)
    model = Cruncher(dim=D, num_layers=num_layers).to(tour.device)
    opt = LectureAdaGrad(model.parameters(), lr=0.01)
    x = torch.randn(B, D, device=tour.device)
    y = torch.tensor([4.0, 5.0], device=tour.device)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tour.inspect("state (before)", before["final.weight"].flatten())

    with tour.claim("one AdaGrad step is the lecture's update: p ← p − lr·g/√(g² + 1e-5), state g2 = g²") as c:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters()}
        opt.step()
        after = model.state_dict()
        tour.inspect("state (after)", after["final.weight"].flatten())
        expected = {name: before[name] - 0.01 * g / torch.sqrt(g * g + 1e-5) for name, g in grads.items()}
        states = {name: opt.state[p]["g2"] for name, p in model.named_parameters()}
        c.check(all(torch.allclose(after[n], expected[n], rtol=1e-6, atol=1e-7) for n in grads), loss=loss.item())
        c.check(all(torch.allclose(states[n], grads[n] ** 2) for n in grads))
    opt.zero_grad(set_to_none=True)
    with tour.claim("trainledger's torch-style AdaGrad takes the same step as torch.optim.Adagrad") as c:
        ours, theirs = Cruncher(dim=D, num_layers=num_layers), Cruncher(dim=D, num_layers=num_layers)
        theirs.load_state_dict(ours.state_dict())
        for module, make in ((ours, AdaGrad), (theirs, torch.optim.Adagrad)):
            o = make(module.parameters(), lr=0.01)
            for _ in range(3):
                F.mse_loss(module(x.cpu()), y.cpu()).backward()
                o.step()
                o.zero_grad()
        c.check(all(torch.allclose(a, b, rtol=1e-6, atol=1e-8) for a, b in zip(ours.parameters(), theirs.parameters())))

    spec = CruncherSpec(dim=D, n_layers=num_layers)
    from trainledger.specs.run import Run
    predicted = memory_per_gpu(spec, None, Run().with_(batch_size=B, seq_len=1, precision="fp32", optimizer="adagrad",
                                                       zero=0, reserve=0.0))
    fresh = Cruncher(dim=D, num_layers=num_layers).to(tour.device)
    fresh_opt = LectureAdaGrad(fresh.parameters(), lr=0.01)
    measured = track_step(fresh, (x, y), fresh_opt, loss_fn=lambda m, batch: F.mse_loss(m(batch[0]), batch[1]))
    step_counters = sum(t.numel() * t.element_size() for s in fresh_opt.state.values() for t in s.values() if t.dim() == 0)
    hidden = sum(n for module, n in measured.activations_by_module.items() if ".layers." in module)
    counts = {
        "params": (predicted["n_params"], sum(p.numel() for p in fresh.parameters())),
        "activations": (predicted["activations"]["hidden"] // FP32_BYTES, hidden // FP32_BYTES),
        "grads": (predicted["grads_bytes"] / FP32_BYTES, measured.grads_bytes // FP32_BYTES),
        "optimizer_states": (predicted["optimizer_bytes"] / FP32_BYTES, (measured.optimizer_bytes - step_counters) // FP32_BYTES),
    }
    tour.inspect("counts [predicted by account, measured by measure]", counts)
    descriptions = {"params": "D·D·num_layers + D", "activations": "B·D·num_layers (the hidden layers' outputs)",
                    "grads": "one per parameter", "optimizer_states": "AdaGrad: g2, one per parameter"}
    for name, (pred, meas) in counts.items():
        with tour.claim(f"{name} = {LECTURE_OPTIMIZER[name]} ({descriptions[name]}): account = measure = lecture") as c:
            c.check(pred == meas == LECTURE_OPTIMIZER[name], predicted=pred, measured=meas, lecture=LECTURE_OPTIMIZER[name])
    with tour.claim("total_memory = 4 bytes × (36 + 16 + 36 + 36) = 496 bytes: account = measure = lecture") as c:
        parts = ("params_bytes", "grads_bytes", "optimizer_bytes")
        pred_total = sum(predicted[k] for k in parts) + predicted["activations"]["hidden"]
        meas_total = measured.params_bytes + measured.grads_bytes + measured.optimizer_bytes - step_counters + hidden
        c.check(pred_total == meas_total == LECTURE_OPTIMIZER["bytes"], predicted=pred_total, measured=meas_total,
                lecture=LECTURE_OPTIMIZER["bytes"], account_total_bytes=predicted["total_bytes"],
                measured_activations_bytes=measured.activations_bytes, step_counter_bytes=step_counters)
    tour.note(f"the lecture's 496 leaves out the model's [B] output that the loss keeps ({predicted['activations']['output']} "
              f"bytes; account's total_bytes is {predicted['total_bytes']:.0f}) and the optimizer's 0-dim step "
              f"counters ({step_counters} bytes, which measure sees in optimizer_bytes = {measured.optimizer_bytes})")
    with tour.claim("one step costs 6 · B · num_parameters = 432 FLOPs: account = FlopCounterMode = lecture") as c:
        pred_flops = flops_per_step(spec, batch_size=B, seq_len=1)["train_flops_per_step"]
        x_in = x.clone().requires_grad_(True)  # as a deeper layer's input, so x.grad is computed too
        step = count_step_flops(lambda: F.mse_loss(fresh(x_in), y))
        tour.inspect("flops (forward, backward)", (step.forward.total, step.backward.total))
        c.check(pred_flops == step.train == LECTURE_OPTIMIZER["flops"], predicted=pred_flops, measured=step.train,
                lecture=LECTURE_OPTIMIZER["flops"])


def train_loop(tour: Tour) -> None:
    import torch
    import torch.nn.functional as F

    from trainledger.models import Cruncher
    from trainledger.optim import SGD

    D, B, steps = 16, 4, 10
    true_w = torch.arange(D, dtype=torch.float32, device=tour.device)

    def get_batch(generator, size: int = B):
        x = torch.randn(size, D, generator=generator).to(tour.device)
        return x, x @ true_w

    held_out = get_batch(torch.Generator().manual_seed(1234), size=4096)

    def train(num_layers: int, lr: float) -> dict:
        """The lecture's loop, honouring its lr and num_layers arguments; the same data stream for every run."""
        torch.manual_seed(0)
        model = Cruncher(dim=D, num_layers=num_layers).to(tour.device)
        opt = SGD(model.parameters(), lr=lr)
        generator = torch.Generator().manual_seed(0)
        evals = [evaluate(model)]
        for _ in range(steps):
            x, y = get_batch(generator)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            evals.append(evaluate(model))
        return {"eval_losses": evals, "n_params": sum(p.numel() for p in model.parameters()),
                "lr": opt.param_groups[0]["lr"]}

    def evaluate(model) -> float:
        """MSE on a fixed held-out batch of 4096 (the 4-example training losses are too noisy to compare)."""
        with torch.no_grad():
            return F.mse_loss(model(held_out[0]), held_out[1]).item()

    runs = {lr: train(num_layers=0, lr=lr) for lr in (0.01, 0.1)}
    for lr, run in runs.items():
        tour.inspect(f"lr={lr}: held-out loss before, after {steps} steps", (run["eval_losses"][0], run["eval_losses"][-1]))
    with tour.claim("both runs start from the same model; the held-out loss falls over 10 SGD steps in each") as c:
        c.check(runs[0.01]["eval_losses"][0] == runs[0.1]["eval_losses"][0],
                initial=[r["eval_losses"][0] for r in runs.values()])
        c.check(all(r["eval_losses"][-1] < r["eval_losses"][0] for r in runs.values()),
                final={str(lr): r["eval_losses"][-1] for lr, r in runs.items()})
    with tour.claim("the optimizer gets the lr it is passed, and lr=0.1 ends lower than lr=0.01 (the tuning pays off)") as c:
        c.check(runs[0.1]["lr"] == 0.1 and runs[0.01]["lr"] == 0.01, lrs=[r["lr"] for r in runs.values()])
        c.check(runs[0.1]["eval_losses"][-1] < runs[0.01]["eval_losses"][-1],
                final={str(lr): r["eval_losses"][-1] for lr, r in runs.items()})
    with tour.claim("num_layers is honoured: num_layers=2 builds 2·D² + D parameters, num_layers=0 only D") as c:
        deep = train(num_layers=2, lr=0.01)
        c.check(runs[0.01]["n_params"] == D and deep["n_params"] == 2 * D * D + D,
                n_params={"num_layers=0": runs[0.01]["n_params"], "num_layers=2": deep["n_params"]})
    tour.note("the lecture's train() builds Cruncher(num_layers=0) and SGD(lr=0.01) whatever it is passed, so its "
              "'hyperparameter tuning' call with lr=0.1 re-ran lr=0.01 (and printed nothing: its loop has no "
              "logging); the tour passes both arguments through and prints the losses")


def checkpointing(tour: Tour) -> None:
    import torch
    import torch.nn.functional as F

    from trainledger.models import Cruncher
    from trainledger.optim import LectureAdaGrad
    from trainledger.train.checkpoint import begin, commit, latest_good, load_trainer_state, verify, write_trainer_state

    torch.manual_seed(0)
    D = 64
    x, y = torch.randn(8, D, device=tour.device), torch.randn(8, device=tour.device)

    def step(model, opt):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    model = Cruncher(dim=D, num_layers=3).to(tour.device)
    opt = LectureAdaGrad(model.parameters(), lr=0.01)
    step(model, opt)
    directory = tour.workdir / "checkpoints"
    tmp = begin(directory, step=1)
    write_trainer_state(tmp, {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 1})
    path = commit(tmp, directory, step=1, fmt="single")
    tour.inspect("checkpoint files", sorted(p.name for p in path.iterdir()))
    with tour.claim("save: the checkpoint directory is complete and every file passes its sha256 check") as c:
        ref, fmt = latest_good(directory, warn=lambda message: None)
        c.check(ref is not None and ref.path == path and verify(path)[1] is None, path=path.name, format=fmt)

    loaded = load_trainer_state(path)
    restored = Cruncher(dim=D, num_layers=3).to(tour.device)
    restored_opt = LectureAdaGrad(restored.parameters(), lr=0.01)
    restored.load_state_dict(loaded["model"])
    restored_opt.load_state_dict(loaded["optimizer"])
    with tour.claim("load: model parameters and optimizer state (g2) are identical to the saved ones") as c:
        same_model = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), restored.state_dict().values()))
        same_state = all(torch.equal(opt.state[p]["g2"], restored_opt.state[q]["g2"])
                         for p, q in zip(model.parameters(), restored.parameters()))
        c.check(same_model and same_state and loaded["step"] == 1, same_model=same_model, same_optimizer_state=same_state)
    with tour.claim("resume: the next steps from the checkpoint give exactly the losses of the uninterrupted run") as c:
        continued = [step(model, opt) for _ in range(3)]
        resumed = [step(restored, restored_opt) for _ in range(3)]
        tour.inspect("losses after step 1 (continued, resumed)", (continued, resumed))
        c.check(continued == resumed, continued=continued, resumed=resumed)
    with tour.claim("a corrupted checkpoint is detected by its sha256 manifest") as c:
        trainer_file = path / "trainer.pt"
        data = bytearray(trainer_file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        trainer_file.write_bytes(bytes(data))
        problem = verify(path)[1]
        c.check(problem is not None, problem=problem)
    tour.note("the lecture saves {'model', 'optimizer'} with torch.save; trainledger's checkpoints add the step "
              "and RNG states, are written atomically with a sha256 manifest, and load with weights_only=True")


SECTIONS = [
    Section("randomness", "Randomness and seeds", randomness, "note_about_randomness"),
    Section("data-loading", "Data loading: memmap and get_batch", data_loading, "data_loading, get_batch"),
    Section("optimizer", "An AdaGrad step, accounted and measured", optimizer, "optimizer, AdaGrad"),
    Section("train-loop", "The training loop at two learning rates", train_loop, "train_loop, train"),
    Section("checkpointing", "Checkpointing: save, load, resume", checkpointing, "checkpointing"),
]
