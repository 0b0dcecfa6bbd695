"""Memory: bytes a training step holds per GPU, by named part. Imports account.counting only."""
