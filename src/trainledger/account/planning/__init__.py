"""Planning: whole runs and searches over steps (time to train, the layout search, failures). Imports the layers below."""
