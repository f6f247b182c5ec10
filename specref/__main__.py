"""Command line: `python -m specref COMMAND [options]`; `python -m specref COMMAND --help` lists a command's options.

Only the chosen command's module is imported: the list of commands below is a table, and a
command's options are declared by `add_arguments(parser)` in its own module, which is imported
once the command is known.  So `--help` of every command needs only the core dependencies
(numpy, scipy, gguf); `figures` needs matplotlib only to draw (`pip install 'specref[plots]'`).

Options are checked as they are read (types in `specref.apps.options`, and a module's
`check_args(args)` if it has one): a bad value ends the command with one error line and status
2 before a model or a data set is loaded.

BLAS threads: OpenBLAS reads OPENBLAS_NUM_THREADS once, when NumPy is imported, so this module
sets it before anything imports NumPy (notebook 05 sets it the same way, so that it runs the
model as the commands do).  It is 1 unless the environment sets it (the fast path's small
products never gain from BLAS threads, it splits products over the cores itself, and on a shared
2-core machine OpenBLAS's spinning worker threads made prefill 3x slower; see specref.fast.kernels);
`bench --blas-threads N` sets it to N; `train-draft` uses every core unless told otherwise.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy is imported: see the docstring

import argparse  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402

from specref.apps import options  # noqa: E402  (imports no NumPy)

PROG = "python -m specref"

# command -> (module with add_arguments(parser) and run(args) -> int, one-line help)
COMMANDS = {
    "demo": ("specref.apps.demo", "ArS vs SpS on SmolLM2-135M, streamed with accepted drafts highlighted"),
    "bench": ("specref.apps.bench", "measure decode, scoring and verify costs; write JSON"),
    "humaneval": ("specref.apps.humaneval", "HumanEval pass@1 and speed for ArS and SpS"),
    "figures": ("specref.apps.figures", "regenerate every figure in figures/ as PNG (--quick for small sizes)"),
    "draft-data": ("specref.apps.draft_build", "build the neural draft's data at scale (hours; resumable)"),
    "train-draft": ("specref.apps.train_draft", "train the neural draft from the target (about 30 minutes; --quick: 1)"),
    "conform": ("specref.apps.conform", "check a speculative-sampling verifier MODULE:FUNCTION against the proofs"),
}

# Commands with --blas-threads N: read from the command line before NumPy is imported.
BLAS_THREADS_OPTION = "--blas-threads"
BLAS_THREADS_COMMANDS = ("bench", "train-draft")
# Commands whose default is every core (0 or no --blas-threads): training multiplies large matrices.
ALL_CORES_COMMANDS = ("train-draft",)


def top_parser() -> argparse.ArgumentParser:
    """`python -m specref`: the commands and their one-line help, from COMMANDS (nothing imported)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Speculative sampling (Chen et al. 2023; Leviathan et al. 2023) in NumPy, "
                               "with SmolLM2-135M as the target.",
        epilog=f"'{PROG} COMMAND --help' lists the options of COMMAND.")
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def blas_threads_from(argv: list[str]) -> int | None:
    """The value of --blas-threads in argv (the last one, as argparse takes), if it is a valid count."""
    value = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == BLAS_THREADS_OPTION and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(BLAS_THREADS_OPTION + "="):
            value = arg.split("=", 1)[1]
    try:
        return options.integer(0)(value) if value is not None else None
    except argparse.ArgumentTypeError:
        return None  # the command's parser reports it


def set_blas_threads(n: int | None) -> None:
    """OPENBLAS_NUM_THREADS=n (n >= 1), if NumPy is not imported yet (afterwards it would change nothing)."""
    if n and "numpy" not in sys.modules:
        os.environ["OPENBLAS_NUM_THREADS"] = str(n)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        # --help, no command or an unknown one: argparse prints the help or one error line and exits
        command = top_parser().parse_args(argv).command
        argv = argv[argv.index(command):]
    name, rest = argv[0], argv[1:]
    if name in BLAS_THREADS_COMMANDS:
        threads = blas_threads_from(rest)
        set_blas_threads(threads or (os.cpu_count() if name in ALL_CORES_COMMANDS else None))
    module_name, help_text = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"{PROG} {name}", description=help_text, allow_abbrev=False)
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    args.command = name
    threads = getattr(args, BLAS_THREADS_OPTION[2:].replace("-", "_"), None)
    if threads and os.environ.get("OPENBLAS_NUM_THREADS") != str(threads):
        parser.error(f"argument {BLAS_THREADS_OPTION}: NumPy was imported before the thread count could be set; "
                     f"run with OPENBLAS_NUM_THREADS={threads} in the environment instead")
    check = getattr(module, "check_args", None)
    if check is not None:
        try:
            check(args)
        except ValueError as e:
            parser.error(str(e))
    return module.run(args)


if __name__ == "__main__":
    sys.exit(main())
