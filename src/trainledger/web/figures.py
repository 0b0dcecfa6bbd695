"""Data for the page's drawings that the commands do not print: each endpoint takes the same query as its command,
runs the command through api.answer (so bad input is the same 422), and adds what a drawing needs by calling the
package's own functions (account/, specs/) — never by restating a formula.

    GET /api/optimal-curve?<optimal flags>   the iso-FLOP curve: predicted loss of many splits of the budget
    GET /api/tensor-storage?<tensor flags>   the storage slot each element of the view reads
    GET /api/dtype-round?value=1e-8          a value rounded to each float format (fp16(1e-8) == 0)
"""

from __future__ import annotations

import itertools
import math

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from trainledger.cli.common import json_ready
from trainledger.web.api import answer, settings_of

router = APIRouter(prefix="/api")


@router.get("/optimal-curve")
def optimal_curve(request: Request) -> JSONResponse:
    """The iso-FLOP curve behind `trainledger optimal` (same query): predicted loss of many splits N·D of its budget.

    The budget and the optimum are the command's answer; each point keeps N·D equal to the optimum's, so it
    spends the same C = 6·N·D, and its loss is account.planning.plan.approach3_loss(N, D) (Chinchilla Approach 3).
    N runs from 1/100 to 100 times the optimum in 81 log-spaced points.
    """
    from trainledger.account.planning.plan import approach3_loss

    status, body, argv = answer("optimal", list(request.query_params.multi_items()), settings_of(request))
    if status != 200:
        return JSONResponse(body, status_code=status)
    n_opt, d_opt = body["n_params"], body["n_tokens"]
    points = []
    for step in range(-40, 41):
        n = n_opt * 10 ** (step / 20)
        d = n_opt * d_opt / n
        points.append({"n_params": n, "n_tokens": d, "predicted_loss": approach3_loss(n, d)})
    optimum = {key: body[key] for key in ("n_params", "n_tokens", "predicted_loss")}
    return JSONResponse(json_ready({"budget_flops": body["budget_flops"], "law": body.get("law"), "optimum": optimum,
                                "points": points, "argv": argv}))


@router.get("/dtype-round")
def dtype_round(value: str = "1e-8") -> JSONResponse:
    """`value` stored in each float dtype: specs.dtypes.round_to_dtype (nearest, ties to even; below half the
    smallest subnormal it flushes to 0: the lecture's fp16(1e-8) == 0 while bf16(1e-8) ≈ 1.0012e-8)."""
    from trainledger.specs.dtypes import DTYPES, round_to_dtype

    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        message = f"value must be a finite number like 1e-8, got {value!r}"
        return JSONResponse({"error": message, "detail": message, "flag": "value", "param": "value"}, status_code=422)
    rows = []
    for dtype in DTYPES:
        if dtype.kind != "float":
            continue
        rounded = round_to_dtype(number, dtype)
        rows.append({"name": dtype.name, "value": number, "rounded": rounded,
                     "underflows": number != 0 and rounded == 0, "overflows": not math.isfinite(rounded)})
    return JSONResponse(json_ready(rows))


TENSOR_DRAW_LIMIT = 1024  # elements: larger tensors get numbers but no drawing


@router.get("/tensor-storage")
def tensor_storage(request: Request) -> JSONResponse:
    """Where each element of the `trainledger tensor` view (same query) lives in the flat storage.

    `storage_index` lists, in the view's row-major order, the storage offset (elements) of every view element:
    the offset of the one-element view x[..][i, j, ...] from account.counting.tensor.Layout.index. Drawn only for
    tensors of at most TENSOR_DRAW_LIMIT elements (`drawable` false otherwise).
    """
    from trainledger.account.counting.tensor import Layout

    status, body, _ = answer("tensor", list(request.query_params.multi_items()), settings_of(request))
    if status != 200:
        return JSONResponse(body, status_code=status)
    result = {"numel": body["numel"], "view_shape": body["view_shape"], "limit": TENSOR_DRAW_LIMIT,
              "drawable": body["numel"] <= TENSOR_DRAW_LIMIT}
    if result["drawable"]:
        view = Layout(tuple(body["view_shape"]), tuple(body["stride"]), body["storage_offset"])
        cells = itertools.product(*(range(size) for size in view.shape))
        result["storage_index"] = [view.index(list(cell)).offset for cell in cells]
    return JSONResponse(result)
