"""Deliberately broken evogan plugins, one module per way of failing (test data)."""
