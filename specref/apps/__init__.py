"""What runs on top of the core: the commands (demo, bench, humaneval, figures), the cost
measurements they share, the sandbox for generated code, and the notebooks' widgets.

Nothing here is imported by the core: `specref.mrs`, `specref.sampling` and friends never
depend on a command, a plot or the model."""
