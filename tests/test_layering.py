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
             "tokenize", "step", "layout", "mfu"):
    importlib.import_module("trainledger.cli." + name)
from trainledger.cli.main import compute
compute(["plan"]); compute(["fit"]); compute(["optimal"])
compute(["flops", "--model", "gpt2"]); compute(["memory", "--model", "gpt2", "--batch-size", "2"])
compute(["params"]); compute(["dtypes"]); compute(["hardware"]); compute(["models"]); compute(["matmul"])
compute(["tensor", "--transpose", "0,1"])  # the pure layout; only --torch needs torch
compute(["step", "--model", "gpt2", "--num-gpus", "8"]); compute(["layout", "--model", "gpt2", "--num-gpus", "8"])
print(json.dumps({"modules": names, "torch": "torch" in sys.modules}))
"""


def test_account_and_specs_do_not_import_torch():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["torch"] is False
    for module in ("trainledger.account.flops", "trainledger.account.memory", "trainledger.account.plan",
                   "trainledger.account.korthikanti", "trainledger.account.params", "trainledger.account.activations",
                   "trainledger.specs.recipes", "trainledger.specs.hardware", "trainledger.specs.presets",
                   "trainledger.account.time", "trainledger.account.comm", "trainledger.account.layout",
                   "trainledger.specs.performance"):
        assert module in report["modules"]
