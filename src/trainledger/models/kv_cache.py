"""A key/value cache for autoregressive decoding: each layer keeps the keys and values of the positions it has seen.

Without a cache, generating token t runs the whole sequence 0..t through the model again; with it, only the new
token runs, and its query attends to the stored keys and values (Pope et al. 2022, "Efficiently Scaling
Transformer Inference", arXiv:2211.05102, Sec. 2: the KV cache; Vaswani et al. 2017 for the attention itself).

Layout: per layer a key tensor and a value tensor of shape (batch, n_kv_heads, slots, head_dim), allocated once,
in the model's dtype. Keys are stored after RoPE (each at its own position), so they are never rotated again.
Grouped-query attention stores n_kv_heads heads, not n_heads (Ainslie et al. 2023, arXiv:2305.13245): the query
heads of a group share them. A layer with a sliding window W keeps only W slots, a ring buffer: position p lives
in slot p mod W, and a query never sees more than the last W keys (Mistral 7B, arXiv:2310.06825, Sec. 2
"Rolling Buffer Cache"). So the bytes are exactly

    Σ_layers 2 · batch · n_kv_heads · head_dim · slots · bytes per element,  slots = capacity or min(capacity, W)

which account/time/inference.py predicts (`kv_cache_bytes`); `nbytes` measures it from the tensors themselves.

Use: `cache = KVCache(spec, batch_size, capacity, ...)`, then `model.forward_cached(idx, cache)` for the prompt
(any length, from position 0) and for each new token. The prompt's forward is the training forward exactly
(same masks, causal kernel); later calls attend to the cache with a mask built from the slots' positions when one
is needed (a window being filled past a chunk, ALiBi's distance bias, soft-capping's written-out softmax).
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from trainledger.errors import TrainledgerError
from trainledger.models.masks import alibi_slopes


class LayerCache:
    """The keys and values of one layer: (batch, n_kv_heads, slots, head_dim) and (..., value_dim) (the same size
    except under multi-head latent attention, whose value heads are smaller); a ring buffer when windowed."""

    def __init__(self, owner: "KVCache", slots: int, window: int | None, *, device, dtype):
        self.owner, self.slots, self.window = owner, slots, window
        shape = (owner.batch_size, owner.spec.kv_heads, slots)
        self.keys = torch.zeros(*shape, owner.spec.head_dim, device=device, dtype=dtype)
        self.values = torch.zeros(*shape, owner.spec.value_dim, device=device, dtype=dtype)

    def slot_positions(self, length: int) -> Tensor:
        """Position held by each of the first min(length, slots) slots once `length` positions have been written."""
        n = min(length, self.slots)
        slot = torch.arange(n, device=self.keys.device)
        if length <= self.slots:
            return slot
        newest = length - 1                    # slot s holds the latest p <= newest with p ≡ s (mod slots)
        return newest - (newest - slot) % self.slots

    def update(self, k: Float[Tensor, "batch kv_heads new head_dim"], v: Float[Tensor, "batch kv_heads new head_dim"],
               mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None, bool]:
        """Store the new keys/values; return (keys, values, mask, causal) for the attention of the new queries.

        From position 0 (the prompt) the attention is the uncached forward's: the new keys themselves, `mask` as
        given and the causal kernel when it is None. Later, the new queries attend to every stored position they
        may see; `causal` is then False and the mask (None when nothing is hidden) comes from the slots' positions.
        """
        start, new = self.owner.length, k.shape[2]
        if start == 0:
            self._write(k, v, 0)
            return k, v, mask, mask is None
        if new == 1 or start + new <= self.slots:   # everything attended to fits in the buffer after the write
            self._write(k, v, start)
            used = min(start + new, self.slots)
            keys, values = self.keys[:, :, :used], self.values[:, :, :used]
            if new == 1 and not self.owner.needs_mask:   # one query after the write: every stored key is visible
                return keys, values, None, False
            keys_pos = self.slot_positions(start + new)
        else:                                        # a chunk longer than the window's free room: attend first
            used = min(start, self.slots)
            keys_pos = torch.cat((self.slot_positions(start), torch.arange(start, start + new, device=k.device)))
            keys = torch.cat((self.keys[:, :, :used], k), dim=2)
            values = torch.cat((self.values[:, :, :used], v), dim=2)
            self._write(k, v, start)
        query_pos = torch.arange(start, start + new, device=k.device)
        return keys, values, self.owner.mask(query_pos, keys_pos, self.window, k.dtype), False

    def _write(self, k: Tensor, v: Tensor, start: int) -> None:
        """Keys and values of positions start, start+1, ... into their slots (the last `slots` of them)."""
        new = k.shape[2]
        if start + new > self.owner.capacity:
            raise TrainledgerError(f"the KV cache holds {self.owner.capacity} positions; writing up to position "
                                   f"{start + new - 1} overflows it")
        keep = min(new, self.slots)
        k, v = k[:, :, new - keep:], v[:, :, new - keep:]
        first = (start + new - keep) % self.slots     # a ring buffer's slot (the position itself without a window)
        if first + keep <= self.slots:
            self.keys[:, :, first:first + keep] = k
            self.values[:, :, first:first + keep] = v
            return
        slots = (first + torch.arange(keep, device=k.device)) % self.slots
        self.keys[:, :, slots] = k
        self.values[:, :, slots] = v


class KVCache:
    """Per-layer key/value caches of a Transformer for `batch_size` sequences of up to `capacity` positions.

    `length`: positions written so far (the next token's position). `nbytes`: bytes of all key and value tensors.
    """

    def __init__(self, spec, batch_size: int, capacity: int, *, device=None, dtype=torch.float32):
        if not isinstance(capacity, int) or capacity <= 0:
            raise TrainledgerError(f"KV cache capacity must be a positive integer, got {capacity!r}")
        self.spec, self.batch_size, self.capacity, self.length = spec, batch_size, capacity, 0
        self._alibi = alibi_slopes(spec.n_heads, spec.alibi_bias_max) if spec.position == "alibi" else None
        self.needs_mask = self._alibi is not None or spec.attn_softcap is not None
        self.layers = []
        for i in range(spec.n_layers):
            window = spec.sliding_window if spec.is_sliding(i) else None
            slots = min(capacity, window) if window is not None else capacity
            self.layers.append(LayerCache(self, slots, window, device=device, dtype=dtype))

    @property
    def nbytes(self) -> int:
        """Bytes of every cached key and value tensor (what the cache costs in memory)."""
        return sum(t.numel() * t.element_size() for layer in self.layers for t in (layer.keys, layer.values))

    def advance(self, new: int) -> None:
        """After a forward over `new` tokens: they are now part of the cached context."""
        self.length += new

    def mask(self, query_pos: Tensor, keys_pos: Tensor, window: int | None, dtype) -> Tensor | None:
        """Additive mask (queries, keys), or (1, heads, queries, keys) with ALiBi: a query sees keys at positions
        <= its own and, in a window of W, > its own − W; ALiBi adds slope_h·(key − query). None when every key is
        visible and no bias or written-out softmax needs one."""
        blocked = keys_pos[None, :] > query_pos[:, None]
        if window is not None:
            blocked = blocked | (keys_pos[None, :] <= query_pos[:, None] - window)
        if not bool(blocked.any()) and not self.needs_mask:
            return None
        if self._alibi is None:
            zeros = torch.zeros(blocked.shape, device=blocked.device, dtype=dtype)
            return zeros.masked_fill_(blocked, float("-inf"))
        slopes = torch.tensor(self._alibi, device=blocked.device, dtype=torch.float32)[:, None, None]
        bias = slopes * (keys_pos[None, :] - query_pos[:, None]).to(torch.float32)
        return bias.masked_fill_(blocked, float("-inf")).to(dtype)[None]
