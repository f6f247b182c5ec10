"""Command line: `python -m specref {demo,bench,humaneval}`."""

import os

# One BLAS thread: the model's small products never use threads, and on a shared 2-core
# machine OpenBLAS's spinning worker threads made prefill 3x slower (see specref.smollm2.model).
# It must be set before NumPy is imported; an explicit setting in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402

# subcommand -> module that provides add_arguments(parser) and run(args) -> int
COMMANDS = {
    "demo": ("specref.apps.demo", "ArS vs SpS on SmolLM2-135M, streamed with accepted drafts highlighted"),
    "bench": ("specref.apps.bench", "measure decode, scoring and verify costs; write JSON"),
    "humaneval": ("specref.apps.humaneval", "HumanEval pass@1 and speed for ArS and SpS"),
    "figures": ("specref.apps.figures", "regenerate every figure in figures/ as PNG (--quick for small sizes)"),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specref", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    return modules[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
