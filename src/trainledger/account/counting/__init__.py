"""Counting: parameters, FLOPs, matmuls, tensors and where parameters sit per GPU. Imports no other account layer."""
