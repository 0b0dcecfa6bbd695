"""trainledger: predict, measure and train — resource accounting for neural-network training.

Layers (one-way dependencies): cli/web -> train -> measure -> models/optim/data -> account -> specs -> units/errors.
`specs` and `account` never import torch.
"""

__version__ = "0.1.0"
