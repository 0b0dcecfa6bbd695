"""Tour sections on tensor operations: storage and strides, views and copies, elementwise ops, matmul, einops.

Follows CS336 Lecture 2 (Spring 2025), `tensor_storage`, `tensor_slicing`, `tensor_elementwise`,
`tensor_matmul` and `tensor_einops`. Shared storage is checked with `trainledger.tensors.same_storage`.
"""

from __future__ import annotations

from trainledger.tour.runner import Section, Tour


def tensor_storage(tour: Tour) -> None:
    import torch

    from trainledger.tensors import same_storage

    x = torch.arange(16.0).reshape(4, 4)
    with tour.claim("a contiguous 4×4 tensor has strides (4, 1); x[1, 2] sits at storage index 1·4 + 2·1 = 6") as c:
        index = 1 * x.stride(0) + 2 * x.stride(1)
        tour.inspect("x.stride()", x.stride())
        tour.inspect("index of x[1, 2]", index)
        c.check(x.stride() == (4, 1) and index == 6 and x.flatten()[index].item() == x[1, 2].item(), stride=x.stride(), index=index)

    x = torch.tensor([[1.0, 2, 3], [4, 5, 6]])
    views = {
        "x[0]": (x[0], [1.0, 2, 3]),
        "x[:, 1]": (x[:, 1], [2.0, 5]),
        "x.view(3, 2)": (x.view(3, 2), [[1.0, 2], [3, 4], [5, 6]]),
        "x.transpose(1, 0)": (x.transpose(1, 0), [[1.0, 4], [2, 5], [3, 6]]),
    }
    for label, (view, expected) in views.items():
        with tour.claim(f"{label} is a view: the expected values and the same storage as x") as c:
            tour.inspect(label, view)
            c.check(torch.equal(view, torch.tensor(expected)) and same_storage(x, view), values=view, strides=view.stride())
    with tour.claim("writing x[0][0] = 100 shows through the transposed view y[0][0]") as c:
        y = x.transpose(1, 0)
        x[0][0] = 100
        c.check(y[0][0].item() == 100, y_00=y[0][0].item())

    with tour.claim("a transposed tensor is not contiguous, and .view(2, 3) on it raises the lecture's RuntimeError") as c:
        x = torch.tensor([[1.0, 2, 3], [4, 5, 6]])
        y = x.transpose(1, 0)
        message = ""
        try:
            y.view(2, 3)
        except RuntimeError as error:
            message = str(error)
        tour.inspect("y.view(2, 3) error", message.split(".")[0])
        c.check(not y.is_contiguous(), is_contiguous=y.is_contiguous())
        c.check("view size is not compatible with input tensor's size and stride" in message, error=message[:120])
    with tour.claim(".contiguous() copies into new storage, after which .view(2, 3) works") as c:
        z = x.transpose(1, 0).contiguous().view(2, 3)
        tour.inspect("x.transpose(1, 0).contiguous().view(2, 3)", z)
        c.check(not same_storage(x, z) and z.is_contiguous() and torch.equal(z, torch.tensor([[1.0, 4, 2], [5, 3, 6]])),
                values=z)
    with tour.claim("reshape is a view when it can be and a copy when it must") as c:
        c.check(same_storage(x, x.reshape(3, 2)) and not same_storage(x, x.T.reshape(6)))


def tensor_elementwise(tour: Tour) -> None:
    import torch

    x = torch.tensor([1, 4, 9])
    expected = {
        "x.pow(2)": (x.pow(2), [1, 16, 81]),
        "x.sqrt()": (x.sqrt(), [1.0, 2, 3]),
        "x.rsqrt()": (x.rsqrt(), [1.0, 1 / 2, 1 / 3]),
        "x + x": (x + x, [2, 8, 18]),
        "x * 2": (x * 2, [2, 8, 18]),
        "x / 0.5": (x / 0.5, [2.0, 8, 18]),
    }
    with tour.claim("elementwise ops on [1, 4, 9]: pow, sqrt, rsqrt, +, *, / give the lecture's values and shape") as c:
        for label, (result, values) in expected.items():
            tour.inspect(label, result)
            c.check(torch.allclose(result.double(), torch.tensor(values, dtype=torch.float64)) and result.shape == x.shape,
                    **{label: result})
    with tour.claim("ones(3, 3).triu() is upper triangular (the causal-mask building block)") as c:
        m = torch.ones(3, 3).triu()
        tour.inspect("torch.ones(3, 3).triu()", m)
        c.check(torch.equal(m, torch.tensor([[1.0, 1, 1], [0, 1, 1], [0, 0, 1]])), triu=m)


def tensor_matmul(tour: Tour) -> None:
    import torch

    with tour.claim("[16, 32] @ [32, 2] -> [16, 2]") as c:
        y = torch.ones(16, 32) @ torch.ones(32, 2)
        tour.inspect("(16×32 @ 32×2).size()", y.size())
        c.check(y.size() == torch.Size([16, 2]) and bool((y == 32).all()), shape=y.size())
    with tour.claim("batched: [4, 8, 16, 32] @ [32, 2] -> [4, 8, 16, 2], one matmul per (batch, sequence) pair") as c:
        x = torch.randn(4, 8, 16, 32, generator=torch.Generator().manual_seed(0))
        w = torch.randn(32, 2, generator=torch.Generator().manual_seed(1))
        y = x @ w
        tour.inspect("(4×8×16×32 @ 32×2).size()", y.size())
        c.check(y.size() == torch.Size([4, 8, 16, 2]), shape=y.size())
        c.check(torch.allclose(y[3, 7], x[3, 7] @ w), one_slice_matches=True)
    with tour.claim("batch dimensions pair up: [4, 8, 16, 32] @ [4, 8, 32, 64] -> [4, 8, 16, 64]") as c:
        y = torch.ones(4, 8, 16, 32) @ torch.ones(4, 8, 32, 64)
        c.check(y.size() == torch.Size([4, 8, 16, 64]), shape=y.size())


def tensor_einops(tour: Tour) -> None:
    import torch
    from einops import einsum, rearrange, reduce
    from jaxtyping import Float

    x: Float[torch.Tensor, "batch seq1 hidden"] = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    y: Float[torch.Tensor, "batch seq2 hidden"] = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1))
    with tour.claim("jaxtyping names the axes: a (2, 3, 4) float tensor is a Float[Tensor, 'batch seq hidden'], a (2, 3) one is not") as c:
        annotation = Float[torch.Tensor, "batch seq hidden"]
        c.check(isinstance(x, annotation) and not isinstance(x[0], annotation),
                matches_3d=isinstance(x, annotation), matches_2d=isinstance(x[0], annotation))
    with tour.claim("einsum 'batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2' equals x @ y.transpose(-2, -1)") as c:
        old = x @ y.transpose(-2, -1)
        z = einsum(x, y, "batch seq1 hidden, batch seq2 hidden -> batch seq1 seq2")
        z_ellipsis = einsum(x, y, "... seq1 hidden, ... seq2 hidden -> ... seq1 seq2")
        tour.inspect("einsum(...).shape", z.shape)
        c.check(z.shape == (2, 3, 3) and torch.allclose(z, old) and torch.allclose(z_ellipsis, old), shape=z.shape)
    with tour.claim("reduce '... hidden -> ...' with 'sum' sums the hidden axis (the lecture's x.mean(-1) is 'mean')") as c:
        ones: Float[torch.Tensor, "batch seq hidden"] = torch.ones(2, 3, 4)
        summed, mean = reduce(ones, "... hidden -> ...", "sum"), reduce(ones, "... hidden -> ...", "mean")
        tour.inspect("reduce(ones(2, 3, 4), '... hidden -> ...', 'sum')", summed)
        c.check(torch.equal(summed, torch.full((2, 3), 4.0)) and torch.equal(mean, ones.mean(dim=-1)), summed=summed)
    with tour.claim("rearrange splits total_hidden=8 into heads=2 × hidden1=4 and merges back, losslessly") as c:
        flat: Float[torch.Tensor, "batch seq total_hidden"] = torch.arange(48.0).reshape(2, 3, 8)
        split = rearrange(flat, "... (heads hidden1) -> ... heads hidden1", heads=2)
        w: Float[torch.Tensor, "hidden1 hidden2"] = torch.ones(4, 4)
        transformed = einsum(split, w, "... hidden1, hidden1 hidden2 -> ... hidden2")
        merged = rearrange(transformed, "... heads hidden2 -> ... (heads hidden2)")
        tour.inspect("split shape", split.shape)
        tour.inspect("merged shape", merged.shape)
        c.check(split.shape == (2, 3, 2, 4) and torch.equal(split[0, 0, 1], flat[0, 0, 4:]), split_shape=split.shape)
        c.check(merged.shape == (2, 3, 8) and torch.equal(rearrange(split, "... h d -> ... (h d)"), flat),
                merged_shape=merged.shape)


SECTIONS = [
    Section("tensor-storage", "Storage, strides, slicing, views and contiguity", tensor_storage,
            "tensor_storage, tensor_slicing"),
    Section("tensor-elementwise", "Elementwise operations and triu", tensor_elementwise, "tensor_elementwise"),
    Section("tensor-matmul", "Matrix multiplication and batched matmul", tensor_matmul, "tensor_matmul"),
    Section("tensor-einops", "einops (einsum, reduce, rearrange) with jaxtyping shapes", tensor_einops,
            "tensor_einops, jaxtyping_basics, einops_einsum, einops_reduce, einops_rearrange"),
]
