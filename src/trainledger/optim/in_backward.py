"""The optimizer step fused into backward: each parameter is updated, and its gradient freed, as soon as it is ready.

    for each parameter p:  p.register_post_accumulate_grad_hook(lambda p: (opt_p.step(), opt_p.zero_grad()))

PyTorch's tutorial "How to save memory by fusing the optimizer step into the backward pass" (torch.org tutorials,
`register_post_accumulate_grad_hook`, PyTorch >= 2.1), as torchtune's `optimizer_in_bwd` runs it: one optimizer
per parameter, stepped by the hook that autograd calls once p.grad holds p's whole gradient (every use of p in the
graph has contributed, and the node that needed p's value has already run). At most a few gradients exist at any
moment instead of all of them, so the gradients' memory drops from the model's size to about its largest tensors.

What it rules out, as torchtune refuses them: gradient accumulation (the step would run on each micro-batch's
partial gradient), clipping by the global norm (no moment holds every gradient) and loss scaling (the unscale and
the inf check need every gradient first). Each per-parameter update is the grouped optimizer's update of that
one tensor, so without clipping the weights equal a plain step's bit for bit (tests/optim/test_in_backward.py).

`OptimizerInBackward` is a torch.optim.Optimizer so the learning-rate schedulers accept it: its `param_groups` are
the per-parameter optimizers' own group dicts (a schedule's lr reaches them), `step()` and `zero_grad()` do nothing
(the hooks did it), and state_dict()/load_state_dict() carry every inner optimizer's state in parameter order.
"""

from __future__ import annotations

from collections import OrderedDict

import torch


class OptimizerInBackward(torch.optim.Optimizer):
    """Per-parameter optimizers stepped from post-accumulate-grad hooks (module docstring).

    `groups`: parameter groups as torch.optim takes them; `make(groups) -> Optimizer` builds one optimizer."""

    def __init__(self, groups: list[dict], make):
        # torch.optim.Optimizer.__init__ would copy the group dicts: the inner optimizers' own dicts are used instead
        self.defaults = {}
        self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = OrderedDict(), OrderedDict()
        self._optimizer_state_dict_pre_hooks, self._optimizer_state_dict_post_hooks = OrderedDict(), OrderedDict()
        self._optimizer_load_state_dict_pre_hooks = OrderedDict()
        self._optimizer_load_state_dict_post_hooks = OrderedDict()
        self.optimizers: list[torch.optim.Optimizer] = []
        self.param_groups: list[dict] = []
        self._handles = []
        for group in groups:
            for p in group["params"]:
                inner = make([{**group, "params": [p]}])
                self.optimizers.append(inner)
                self.param_groups.extend(inner.param_groups)
                self._handles.append(p.register_post_accumulate_grad_hook(self._hook(inner)))

    @staticmethod
    def _hook(inner: torch.optim.Optimizer):
        def step_and_free(p: torch.Tensor) -> None:
            inner.step()
            inner.zero_grad(set_to_none=True)
        return step_and_free

    @property
    def state(self) -> dict:
        """Every inner optimizer's per-parameter state, by parameter (what measure/ counts as optimizer bytes)."""
        return {p: s for inner in self.optimizers for p, s in inner.state.items()}

    def step(self, closure=None):
        """Nothing to do: every parameter was stepped inside backward. (Kept so schedulers see a step.)"""
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The hooks freed each gradient; frees any left by a backward that reached only part of the model."""
        for inner in self.optimizers:
            inner.zero_grad(set_to_none=True)

    def state_dict(self) -> dict:
        return {"in_backward": [inner.state_dict() for inner in self.optimizers]}

    def load_state_dict(self, state_dict: dict) -> None:
        saved = state_dict.get("in_backward") if isinstance(state_dict, dict) else None
        if not isinstance(saved, list) or len(saved) != len(self.optimizers):
            raise ValueError(f"optimizer state for {len(saved) if isinstance(saved, list) else 'no'} per-parameter "
                             f"optimizers, this run has {len(self.optimizers)} (--optimizer-in-backward)")
        for inner, state in zip(self.optimizers, saved):
            inner.load_state_dict(state)

    def remove_hooks(self) -> None:
        """Detaches the hooks from the parameters (after which backward no longer steps them)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def __repr__(self) -> str:
        kind = type(self.optimizers[0]).__name__ if self.optimizers else "none"
        return f"OptimizerInBackward({len(self.optimizers)} × {kind})"
