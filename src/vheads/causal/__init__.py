"""The causal map of every head: exact one-head scans and their attribution-patching estimate."""
