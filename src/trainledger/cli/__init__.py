"""The `trainledger` command line: thin modules, one per subcommand, no formulas (those live in account/)."""
