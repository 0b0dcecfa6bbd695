"""Tour sections on tensors: creating them, what they cost in bytes per dtype, and moving them to a GPU.

Follows CS336 Lecture 2 (Spring 2025), `tensors_basics`, `tensors_memory` and `tensors_on_gpus`.
Published values the claims compare against are the lecture's, quoted below with where they appear.
"""

from __future__ import annotations

from trainledger.tour.runner import Section, Tour

# tensors_memory: "GPT-3's feedforward layers use a weight matrix of shape [12288 × 4, 12288] ... in float32
# that's 2,415,919,104 bytes = 2.3 GB" (lecture notes; ../shared/reference/facts.md)
GPT3_FFN_SHAPE = (4 * 12288, 12288)
LECTURE_GPT3_FFN_FP32_BYTES = 2_415_919_104
# tensors_memory: fp16 range ±65504 and bf16 max 3.38953e+38 as printed by the lecture's torch.finfo cells
LECTURE_FP16_MAX = 65504.0
LECTURE_BF16_MAX = 3.38953e38
# tensors_memory: "H100 supports two FP8 formats: E4M3 (range [-448, 448]) and E5M2 ([-57344, 57344])"
LECTURE_E4M3_MAX = 448.0
LECTURE_E5M2_MAX = 57344.0
# facts.md (the lecture's trace): bf16(1e-8) ≈ 1.0012e-8
LECTURE_BF16_1E_8 = 1.0012e-8


def tensors_basics(tour: Tour) -> None:
    import torch
    from torch import nn

    with tour.claim("torch.tensor, zeros, ones and randn build 2×3 and 4×8 float32 tensors") as c:
        x = torch.tensor([[1.0, 2, 3], [4, 5, 6]])
        tour.inspect("torch.tensor([[1., 2, 3], [4, 5, 6]])", x)
        shapes = {name: tuple(make(4, 8).shape) for name, make in
                  (("zeros", torch.zeros), ("ones", torch.ones), ("randn", torch.randn))}
        c.check(x.shape == (2, 3) and all(s == (4, 8) for s in shapes.values()) and x.dtype == torch.float32,
                shapes=shapes, dtype=str(x.dtype))
    with tour.claim("torch.zeros is all zeros and torch.ones all ones") as c:
        c.check(bool((torch.zeros(4, 8) == 0).all()) and bool((torch.ones(4, 8) == 1).all()))
    with tour.claim("randn(4, 8) samples look like N(0, 1): |mean| < 0.5, 0.5 < std < 1.5 (32 samples, seed 0)") as c:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(4, 8, generator=gen)
        c.check(abs(x.mean().item()) < 0.5 and 0.5 < x.std().item() < 1.5, mean=x.mean().item(), std=x.std().item())
    with tour.claim("torch.empty allocates; nn.init.trunc_normal_(a=-2, b=2) fills it inside [-2, 2]") as c:
        x = torch.empty(4, 8)
        nn.init.trunc_normal_(x, mean=0, std=1, a=-2, b=2)
        tour.inspect("trunc_normal_(empty(4, 8), std=1, a=-2, b=2)", x)
        c.check(x.min().item() >= -2 and x.max().item() <= 2, min=x.min().item(), max=x.max().item())


def tensors_memory(tour: Tour) -> None:
    import torch

    with tour.claim("float32 is the default: zeros(4, 8) has 32 elements of 4 bytes = 128 bytes") as c:
        x = torch.zeros(4, 8)
        memory_bytes = x.numel() * x.element_size()
        tour.inspect("zeros(4, 8): numel × element_size (bytes)", memory_bytes)
        c.check(x.dtype == torch.float32 and x.numel() == 32 and x.element_size() == 4 and memory_bytes == 128,
                memory_bytes=memory_bytes)

    sizes = {str(dtype).removeprefix("torch."): torch.empty(0, dtype=dtype).element_size()
             for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)}
    tour.inspect("element_size (bytes)", sizes)
    with tour.claim("element sizes: float32 4, float16 2, bfloat16 2, fp8 1 byte") as c:
        c.check(sizes == {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1},
                element_size_bytes=sizes)
    with tour.claim("element sizes agree with trainledger.specs.dtypes") as c:
        agrees, values = _dtype_table_agrees(sizes)
        c.check(agrees, **values)

    with tour.claim("float16 underflows: tensor([1e-8], dtype=float16) == 0") as c:
        fp16 = torch.tensor([1e-8], dtype=torch.float16).item()
        tour.inspect("tensor([1e-8], dtype=float16)", fp16)
        c.check(fp16 == 0.0, fp16_value=fp16)
    with tour.claim("bfloat16 does not: tensor([1e-8], dtype=bfloat16) ≈ 1.0012e-8 (lecture)") as c:
        bf16 = torch.tensor([1e-8], dtype=torch.bfloat16).item()
        tour.inspect("tensor([1e-8], dtype=bfloat16)", bf16)
        c.approx(bf16, LECTURE_BF16_1E_8, rel=1e-4, bf16_value=bf16, lecture=LECTURE_BF16_1E_8)

    infos = {name: torch.finfo(dtype) for name, dtype in
             (("float32", torch.float32), ("float16", torch.float16), ("bfloat16", torch.bfloat16))}
    for name, info in infos.items():
        tour.inspect(f"finfo({name})", {"min": info.min, "max": info.max, "eps": info.eps, "tiny": info.tiny})
    with tour.claim("finfo: float16 max 65504; bfloat16 keeps float32's range (max ≈ 3.39e38, tiny = float32 tiny)") as c:
        c.check(infos["float16"].max == LECTURE_FP16_MAX, float16_max=infos["float16"].max)
        c.approx(infos["bfloat16"].max, LECTURE_BF16_MAX, rel=1e-5, bfloat16_max=infos["bfloat16"].max)
        c.check(infos["bfloat16"].tiny == infos["float32"].tiny, bfloat16_tiny=infos["bfloat16"].tiny)
    with tour.claim("finfo: bfloat16 trades precision for range (eps 2^-7 vs float16 2^-10 vs float32 2^-23)") as c:
        eps = {name: info.eps for name, info in infos.items()}
        c.check(eps == {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}, eps=eps)

    with tour.claim("fp8 ranges: E4M3 ±448, E5M2 ±57344 (torch.float8_e4m3fn, torch.float8_e5m2)") as c:
        e4m3, e5m2 = torch.finfo(torch.float8_e4m3fn), torch.finfo(torch.float8_e5m2)
        tour.inspect("finfo(float8_e4m3fn) min/max", (e4m3.min, e4m3.max))
        tour.inspect("finfo(float8_e5m2) min/max", (e5m2.min, e5m2.max))
        c.check((e4m3.min, e4m3.max) == (-LECTURE_E4M3_MAX, LECTURE_E4M3_MAX), e4m3=(e4m3.min, e4m3.max))
        c.check((e5m2.min, e5m2.max) == (-LECTURE_E5M2_MAX, LECTURE_E5M2_MAX), e5m2=(e5m2.min, e5m2.max))
        saturated = torch.tensor([1000.0]).to(torch.float8_e5m2).float().item()
        c.check(saturated == 1024.0, e5m2_of_1000=saturated)

    with tour.claim("specs.dtypes, computed from bit layouts, predicts torch's finfo (max, eps, tiny) and its rounding of 1e-8") as c:
        from trainledger.specs.dtypes import get_dtype, round_to_dtype

        for torch_dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
            name = str(torch_dtype).removeprefix("torch.")
            spec, info = get_dtype(name), torch.finfo(torch_dtype)
            predicted = (spec.max, spec.eps, spec.smallest_normal)
            c.check(predicted == (info.max, info.eps, info.tiny), **{name: {"predicted": predicted, "torch": (info.max, info.eps, info.tiny)}})
            rounded = torch.tensor([1e-8], dtype=torch.float32).to(torch_dtype).float().item()
            c.check(round_to_dtype(1e-8, name) == rounded, **{f"{name}(1e-8)": {"predicted": round_to_dtype(1e-8, name), "torch": rounded}})

    with tour.claim("one GPT-3 FFN matrix [49152, 12288] in float32 = 2,415,919,104 bytes (meta device, no memory)") as c:
        w = torch.empty(*GPT3_FFN_SHAPE, device="meta")
        measured_bytes = w.numel() * w.element_size()
        tour.inspect("GPT-3 FFN matrix bytes", measured_bytes)
        c.check(measured_bytes == LECTURE_GPT3_FFN_FP32_BYTES, bytes=measured_bytes,
                lecture_bytes=LECTURE_GPT3_FFN_FP32_BYTES)


def _dtype_table_agrees(sizes: dict) -> tuple[bool, dict]:
    """(all equal, values): torch's element sizes next to trainledger.specs.dtypes' bytes per element."""
    from trainledger.specs import dtypes as table

    names = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8-e4m3", "float8_e5m2": "fp8-e5m2"}
    predicted = {torch_name: table.bytes_per_element(short) for torch_name, short in names.items()}
    return predicted == sizes, {"specs_bytes": predicted, "torch_bytes": sizes}


def tensors_on_gpus(tour: Tour) -> None:
    import torch

    with tour.claim("tensors are created in CPU memory by default") as c:
        x = torch.zeros(32, 32)
        c.check(x.device == torch.device("cpu"), device=x.device)
    with tour.claim("two 32×32 float32 tensors on the GPU add 2·32·32·4 = 8192 bytes to memory_allocated") as c:
        if not torch.cuda.is_available():
            c.skip("no CUDA device on this machine; run `trainledger tour --device cuda` on a GPU")
        if not tour.cuda:
            c.skip("--device cpu was chosen")
        torch.cuda.synchronize()
        tour.inspect("num_gpus", torch.cuda.device_count())
        tour.inspect("device 0", torch.cuda.get_device_properties(0).name)
        before = torch.cuda.memory_allocated()
        y = x.to("cuda:0")
        z = torch.zeros(32, 32, device="cuda:0")
        used = torch.cuda.memory_allocated() - before
        tour.inspect("memory_used (bytes)", used)
        # The caching allocator rounds each block up to 512 bytes; 4096-byte tensors are exact.
        from trainledger.account.counting.tensor import tensor_bytes
        predicted = 2 * tensor_bytes((32, 32), "fp32")
        c.check(y.device == torch.device("cuda", 0) and used == predicted == 2 * 32 * 32 * 4,
                memory_used_bytes=used, predicted_bytes=predicted)
        del y, z


SECTIONS = [
    Section("tensors-basics", "Tensor basics", tensors_basics, "tensors_basics"),
    Section("tensors-memory", "Tensor memory and dtypes", tensors_memory, "tensors_memory"),
    Section("tensors-on-gpus", "Tensors on GPUs", tensors_on_gpus, "tensors_on_gpus"),
]
