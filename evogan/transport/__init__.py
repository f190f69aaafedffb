"""Transports: how encoded envelopes travel between cells (in-process, ZeroMQ)."""
