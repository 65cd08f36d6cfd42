"""Checks of a built variant: the ABI rules through kernel-abi-check (abi) and the
kernel's own test suite run against the variant as users load it (testing)."""
