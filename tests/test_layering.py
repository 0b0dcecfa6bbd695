"""Layering (DESIGN.md): specs/ and account/ never import torch, and the planning commands answer without it.

Checked in a fresh interpreter, since this test process may already have torch loaded.
"""

import json
import subprocess
import sys

CHECK = r"""
import importlib, json, pkgutil, sys
import trainledger.account, trainledger.specs
names = []
for package in (trainledger.account, trainledger.specs):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
        names.append(info.name)
for name in ("plan", "fit", "optimal", "flops", "memory", "params", "dtypes", "hardware", "models", "matmul", "tensor",
             "tokenize", "step", "layout", "mfu", "infer"):
    importlib.import_module("trainledger.cli." + name)
from trainledger.cli.main import compute
compute(["plan"]); compute(["fit"]); compute(["optimal"])
compute(["flops", "--model", "gpt2"]); compute(["memory", "--model", "gpt2", "--batch-size", "2"])
compute(["params"]); compute(["dtypes"]); compute(["hardware"]); compute(["models"]); compute(["matmul"])
compute(["tensor", "--transpose", "0,1"])  # the pure layout; only --torch needs torch
compute(["step", "--model", "gpt2", "--num-gpus", "8"]); compute(["layout", "--model", "gpt2", "--num-gpus", "8"])
compute(["infer", "--model", "llama-3-8b", "--gpu", "h100", "--tp", "2"])
print(json.dumps({"modules": names, "torch": "torch" in sys.modules}))
"""


def test_account_and_specs_do_not_import_torch():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["torch"] is False
    for module in ("trainledger.account.counting.flops", "trainledger.account.memory.per_gpu", "trainledger.account.planning.plan",
                   "trainledger.account.counting.korthikanti", "trainledger.account.counting.params", "trainledger.account.memory.activations",
                   "trainledger.specs.recipes", "trainledger.specs.hardware", "trainledger.specs.presets",
                   "trainledger.account.time.step", "trainledger.account.time.comm", "trainledger.account.planning.layout",
                   "trainledger.specs.performance", "trainledger.account.time.inference",
                   "trainledger.account.time.inference_ops"):
        assert module in report["modules"]


# ----- the import graph of the package, read from the source (no imports run) -----------------------------------
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "trainledger"
# DESIGN.md's layers, bottom (0) to top: a module may import its own layer and those below, never above.
LAYERS = {"units": 0, "errors": 0, "files": 0, "specs": 1, "account": 2, "models": 3, "optim": 3, "data": 3,
          "tensors": 3, "measure": 4, "train": 5, "cli": 6, "web": 6, "tour": 6}
MAX_MODULE_LINES = 500


def _module_name(path: Path) -> str:
    parts = ("trainledger",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:]) if "." in name else Path()
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def import_graph() -> dict[str, set[str]]:
    """{module: trainledger modules it imports, anywhere in its body}; `from pkg import sub` counts as pkg.sub."""
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name, deps = _module_name(path), set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("trainledger")}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("trainledger"):
                subs = [f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")]
                deps |= set(subs) if subs and len(subs) == len(node.names) else {node.module, *subs}
        graph[name] = deps - {name}
    return graph


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    return LAYERS.get(top, 0)


def test_import_graph_is_read():
    graph = import_graph()
    assert "trainledger.models.precision" in graph["trainledger.train.loop"]
    assert "trainledger.specs.performance" in graph["trainledger.specs.hardware"]


def test_no_import_from_a_layer_above():
    upward = sorted(f"{m} -> {d}" for m, deps in import_graph().items() for d in deps if _layer(d) > _layer(m))
    assert upward == []


def test_no_two_modules_import_each_other():
    graph = import_graph()
    pairs = sorted(f"{a} <-> {b}" for a, deps in graph.items() for b in deps if a < b and a in graph.get(b, ()))
    assert pairs == []


def test_no_module_over_500_lines():
    big = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert big == {}


# account/'s own layers (DESIGN.md: "subpackages per layer"), bottom to top: each imports only its own and those below.
ACCOUNT_LAYERS = {"counting": 0, "finetune": 1, "memory": 2, "time": 3, "planning": 4, "validation": 5}


def _account_layer(module: str) -> int | None:
    parts = module.split(".")
    return ACCOUNT_LAYERS.get(parts[2]) if len(parts) > 2 and parts[1] == "account" else None


def test_account_is_in_its_subpackages():
    flat = sorted(p.name for p in (PACKAGE / "account").glob("*.py") if p.name != "__init__.py")
    assert flat == []
    assert {p.name for p in (PACKAGE / "account").iterdir() if p.is_dir() and p.name != "__pycache__"} == set(ACCOUNT_LAYERS)


def test_account_subpackages_import_one_way():
    graph = import_graph()
    upward = sorted(f"{m} -> {d}" for m, deps in graph.items() if _account_layer(m) is not None
                    for d in deps if _account_layer(d) is not None and _account_layer(d) > _account_layer(m))
    assert upward == []
    assert "trainledger.account.counting.placement" in graph["trainledger.account.time.comm"]   # the graph is read


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter[0]; counter[0] += 1; stack.append(child); on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop(); on_stack.discard(member); component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_account_has_no_import_cycle():
    graph = {m: {d for d in deps if d.startswith("trainledger.account.")} for m, deps in import_graph().items()
             if m.startswith("trainledger.account.")}
    assert _cycles(graph) == []


# ----- a run travels as one value (DESIGN.md): no function of account/ takes a spread of settings ---------------
MAX_ACCOUNT_PARAMETERS = 8


def parameter_counts(root: Path) -> list[tuple[int, str]]:
    """(parameters, 'module:function:line') of every function under `root`: positional, keyword-only, *args and
    **kwargs each count one; self and cls do not."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                count = len(names) + (a.vararg is not None) + (a.kwarg is not None) - (names[:1] in (["self"], ["cls"]))
                found.append((count, f"{path.relative_to(root)}:{node.name}:{node.lineno}"))
    return found


def test_parameter_counter_counts_what_a_caller_passes(tmp_path):
    (tmp_path / "m.py").write_text("def f(a, b=1, *c, d, **e): pass\nclass K:\n    def g(self, x, *, y): pass\n")
    assert sorted(parameter_counts(tmp_path)) == [(2, "m.py:g:3"), (5, "m.py:f:1")]


def test_no_account_function_takes_more_than_eight_parameters():
    """The accounting takes the run (specs/run.py) or the group of it a helper needs, never a spread of keywords:
    adding a setting is one field, not a dozen signatures."""
    wide = [where for count, where in parameter_counts(PACKAGE / "account") if count > MAX_ACCOUNT_PARAMETERS]
    assert wide == [], f"{len(wide)} functions of account/ take more than {MAX_ACCOUNT_PARAMETERS} parameters"
