"""What PyTorch's CUDA caching allocator reserves for a sequence of allocations and frees: a replay, pure Python.

A CUDA process holds more memory than its live tensors. PyTorch's caching allocator never returns a freed
block to the driver; it keeps it for the next request, splits it when the request is smaller, and asks CUDA
for a new segment only when no cached block is large enough. A step that frees a large buffer (the fp32
logits of the loss) and then allocates many smaller tensors (the next step's activations) splits that
segment; when the large buffer is needed again, the split segment cannot hold it, and a new one is reserved.
Reserved minus allocated is this fragmentation; it is what `torch.cuda.memory_reserved()` shows above
`memory_allocated()`, and what an out-of-memory error reports as "reserved by PyTorch but unallocated".

`CachingAllocator` follows the default configuration of c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x;
no PYTORCH_CUDA_ALLOC_CONF, one stream):
- every request is rounded up to a multiple of 512 B (kMinBlockSize);
- requests of at most 1 MiB (kSmallSize) use the small pool, packed in 2 MiB segments (kSmallBuffer); larger
  ones the large pool: a request under 10 MiB (kMinLargeAlloc) gets a 20 MiB segment (kLargeBuffer), a larger
  one a segment of its size rounded up to 2 MiB (kRoundLarge);
- a request takes the smallest cached free block of its pool that is large enough (best fit, lowest address
  among equal sizes); the rest of the block is split off and cached when it is at least 512 B (small pool) or
  more than 1 MiB (large pool; `max_split_size` is unlimited by default);
- a freed block merges with free neighbours of the same segment and goes back to its pool;
- when CUDA cannot give a new segment, every cached segment that is wholly free is released
  (`release_cached_blocks`) and the request retried once; then it is an out-of-memory error, whose
  "reserved but unallocated" is what stays cached in partly used segments.
Not modelled: expandable segments, `max_split_size_mb`, `garbage_collection_threshold`, several streams, CUDA
graphs, memory the driver keeps for itself (the CUDA context: see account.memory.per_gpu.CUDA_CONTEXT_BYTES).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

MIN_BLOCK_BYTES = 512                 # kMinBlockSize
SMALL_REQUEST_BYTES = 1 << 20         # kSmallSize: largest request of the small pool
SMALL_SEGMENT_BYTES = 2 << 20         # kSmallBuffer
LARGE_SEGMENT_BYTES = 20 << 20        # kLargeBuffer: segment of a 1-10 MiB request
MIN_LARGE_SEGMENT_REQUEST = 10 << 20  # kMinLargeAlloc
LARGE_ROUNDING_BYTES = 2 << 20        # kRoundLarge


def rounded_request(nbytes: int) -> int:
    """Bytes the allocator hands out for a request of `nbytes` (round_size): a multiple of 512, at least 512."""
    return MIN_BLOCK_BYTES * max(1, -(-nbytes // MIN_BLOCK_BYTES))


def segment_bytes(size: int) -> int:
    """Bytes of the CUDA segment reserved for a (rounded) request of `size` that no cached block holds."""
    if size <= SMALL_REQUEST_BYTES:
        return SMALL_SEGMENT_BYTES
    if size < MIN_LARGE_SEGMENT_REQUEST:
        return LARGE_SEGMENT_BYTES
    return LARGE_ROUNDING_BYTES * -(-size // LARGE_ROUNDING_BYTES)


class OutOfMemory(Exception):
    """The replayed request could not be served; `state` holds the numbers an OutOfMemoryError prints."""

    def __init__(self, state: dict):
        super().__init__(f"out of memory asking for {state['asked_bytes']} B")
        self.state = state


@dataclass(eq=False)
class _Block:
    size: int
    address: int
    small: bool
    allocated: bool = False
    prev: _Block | None = field(default=None, repr=False)
    next: _Block | None = field(default=None, repr=False)

    def key(self) -> tuple[int, int]:
        return (self.size, self.address)


class CachingAllocator:
    """The caching allocator's bookkeeping over a device of `capacity_bytes` (what CUDA can give this process)."""

    def __init__(self, capacity_bytes: float = float("inf")):
        self.capacity_bytes = capacity_bytes
        self.allocated_bytes = 0
        self.reserved_bytes = 0
        self.peak_allocated_bytes = 0
        self.peak_reserved_bytes = 0
        self._free = {True: [], False: []}          # pool (small?) -> sorted [(size, address, block)]
        self._next_address = 0

    # --- the pools ---------------------------------------------------------------------------------------
    def _cache(self, block: _Block) -> None:
        bisect.insort(self._free[block.small], (block.size, block.address, id(block), block))

    def _uncache(self, block: _Block) -> None:
        pool = self._free[block.small]
        pool.pop(bisect.bisect_left(pool, (block.size, block.address, id(block), block)))

    def _best_fit(self, size: int, small: bool) -> _Block | None:
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1))
        return pool.pop(i)[3] if i < len(pool) else None

    def _release_cached(self) -> None:
        """release_cached_blocks: give back every cached block that is a whole segment (never split)."""
        for small, pool in self._free.items():
            kept = []
            for entry in pool:
                block = entry[3]
                if block.prev is None and block.next is None:
                    self.reserved_bytes -= block.size
                else:
                    kept.append(entry)
            self._free[small] = kept

    # --- malloc / free -----------------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> _Block | None:
        """The block serving a request of `nbytes` (None for 0 bytes, which allocates nothing); OutOfMemory if none."""
        if nbytes <= 0:
            return None
        size = rounded_request(nbytes)
        small = size <= SMALL_REQUEST_BYTES
        block = self._best_fit(size, small)
        if block is None:
            new = segment_bytes(size)
            if self.reserved_bytes + new > self.capacity_bytes:
                self._release_cached()
                if self.reserved_bytes + new > self.capacity_bytes:
                    raise OutOfMemory({"asked_bytes": size, "allocated_bytes": self.allocated_bytes,
                                       "reserved_bytes": self.reserved_bytes,
                                       "unallocated_bytes": self.reserved_bytes - self.allocated_bytes})
            block = _Block(new, self._next_address, small)
            self._next_address += new
            self.reserved_bytes += new
            self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        rest = block.size - size
        if (rest >= MIN_BLOCK_BYTES) if small else (rest > SMALL_REQUEST_BYTES):
            tail = _Block(rest, block.address + size, small, prev=block, next=block.next)
            if block.next is not None:
                block.next.prev = tail
            block.next, block.size = tail, size
            self._cache(tail)
        block.allocated = True
        self.allocated_bytes += block.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        return block

    def free(self, block: _Block | None) -> None:
        """Return `block` to its pool, merged with the free blocks beside it in its segment."""
        if block is None:
            return
        block.allocated = False
        self.allocated_bytes -= block.size
        before, after = block.prev, block.next
        if before is not None and not before.allocated:
            self._uncache(before)
            block.address, block.size, block.prev = before.address, block.size + before.size, before.prev
            if before.prev is not None:
                before.prev.next = block
        if after is not None and not after.allocated:
            self._uncache(after)
            block.size, block.next = block.size + after.size, after.next
            if after.next is not None:
                after.next.prev = block
        self._cache(block)


def replay(events, capacity_bytes: float = float("inf")) -> dict:
    """Replays `events` — ("alloc", tag, nbytes) and ("free", tag) in program order — through CachingAllocator.

    Returns {"out_of_memory": False, "peak_allocated_bytes", "peak_reserved_bytes"}, or, when a request fails on a
    device of `capacity_bytes`, {"out_of_memory": True, "event": its index, "asked_bytes", "allocated_bytes",
    "reserved_bytes", "unallocated_bytes"} (the figures of PyTorch's OutOfMemoryError message at that moment).
    """
    allocator = CachingAllocator(capacity_bytes)
    blocks = {}
    for i, event in enumerate(events):
        if event[0] == "alloc":
            try:
                blocks[event[1]] = allocator.malloc(event[2])
            except OutOfMemory as error:
                return {"out_of_memory": True, "event": i, **error.state}
        elif event[0] == "free" and event[1] in blocks:
            allocator.free(blocks.pop(event[1]))
    return {"out_of_memory": False, "peak_allocated_bytes": allocator.peak_allocated_bytes,
            "peak_reserved_bytes": allocator.peak_reserved_bytes}
