"""Validation: published runs as a user would type them, each predicted beside its published figure (top layer)."""
