"""The interactive calculators: a FastAPI app (`trainledger serve`) whose JSON API runs the CLI's compute()."""
