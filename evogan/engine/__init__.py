"""The engine: cells, populations, the generation loop, checkpoints. It knows no particular method."""
