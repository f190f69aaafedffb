"""Built-in plugins: each module is registered exactly like a third-party plugin."""
