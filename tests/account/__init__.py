"""Tests of trainledger.account (a package, so basenames like test_flops.py may repeat under tests/measure/)."""
