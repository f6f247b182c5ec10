"""`python -m specref conform MODULE:FUNCTION`: check someone's speculative-sampling verifier against the suite's proofs.

    python -m specref conform specref.mrs:verify                          # passes
    python -m specref conform specref.proof.bugs.broken:resample_from_q        # fails, diagnosed
    python -m specref conform mypkg.spec:verify --log-probs --rng seed    # through the adapter
    python -m specref conform path/to/file.py:verify --algorithm block
    python -m specref conform specref.mrs:verify_tree_mss --algorithm tree-mss  # a tree verifier
    python -m specref conform --pipeline mypkg.gen:speculative --reference mypkg.gen:plain --new-tokens 8

FUNCTION must do what `specref.mrs.verify` does once the adapter options are applied (see
`specref.proof.conform`, which holds the checks and the adapter); with --algorithm tree-topk,
tree-mss or tree-rrs, what `specref.mrs.verify_tree_topk`, `verify_tree_mss` or `verify_tree_rrs`
does (tokens [N], parents [N], p [N+1, V], q [N+1, V], rng -> the accepted path and one more
token), on trees the checker draws the way that algorithm assumes.  With --pipeline, GENERATE and
PLAIN are whole generators, (n_samples, seed) -> [n_samples, L] token ids, speculative and plain
sampling of the same models (see `specref.proof.pipeline`).  Every check is printed as it
finishes: pass/FAIL, p-value, level, samples, and a diagnosis where a failure matches a known
bug.  Each call has a time limit (--call-limit) and so has the run (--time-limit): a verdict
comes within them whatever the code under test does.  Exit status 0 if every check passed, 1 if
any failed, 3 if none failed but some check tested nothing (INCOMPLETE: a pipeline sample too
small for its chi-square, or ids not range-checked for want of --vocabulary), 2 for a bad option
(one line saying what was wrong).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import specref

from specref import verifiers
from specref.apps import options
from specref.files import write_text
from specref.proof import conform, pipeline

# MODULE:FUNCTION, MODULE dotted or a path to a .py file, FUNCTION possibly dotted (Class.method).
TARGET = re.compile(r"^(?P<module>[^:]+):(?P<function>[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)$")


def target(text: str) -> str:
    """MODULE:FUNCTION, MODULE a dotted module name or a path ending in .py."""
    m = TARGET.match(text)
    if m is None or not (m["module"].endswith(".py") or re.fullmatch(r"[A-Za-z_][\w.]*", m["module"])):
        raise argparse.ArgumentTypeError(f"expected MODULE:FUNCTION such as specref.mrs:verify or file.py:verify, got {text!r}")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The checker's options: what to check and how to call it (the adapter), each checked as it is read."""
    parser.add_argument("target", type=target, metavar="MODULE:FUNCTION", nargs="?", default=None,
                        help="the verifier: a dotted module or a path to a .py file, a colon, the function's name")
    parser.add_argument("--pipeline", type=target, metavar="MODULE:GENERATE", default=None,
                        help="check a whole speculative generator instead: GENERATE(n_samples, seed) -> "
                             "[n_samples, L] token ids, against --reference")
    parser.add_argument("--reference", type=target, metavar="MODULE:PLAIN", default=None,
                        help="with --pipeline: the same models' plain sampling, PLAIN(n_samples, seed) -> [n_samples, L]")
    parser.add_argument("--new-tokens", type=options.integer(1), default=None, metavar="L",
                        help="with --pipeline: compare the first L tokens of each sequence (default: all returned)")
    parser.add_argument("--samples", type=options.integer(1), default=None, metavar="N",
                        help=f"with --pipeline: sequences from each (default {pipeline.SAMPLES})")
    parser.add_argument("--vocabulary", type=options.integer(1), default=None, metavar="V",
                        help="with --pipeline: token ids must be in [0, V) (without it ids are not range-checked, "
                             "and ids GENERATE returns beyond every id PLAIN returned make the run INCOMPLETE)")
    parser.add_argument("--call-limit", type=options.real(0.0, low_open=True), default=None, metavar="SECONDS",
                        help=f"time limit of one call (default {conform.CALL_LIMIT:g} s for a verifier, "
                             f"{pipeline.CALL_LIMIT:g} s for a pipeline call)")
    parser.add_argument("--time-limit", type=options.real(0.0, low_open=True), default=None, metavar="SECONDS",
                        help=f"time limit of the whole run (default {conform.RUN_LIMIT:g} s)")
    parser.add_argument("--algorithm", choices=verifiers.CHAINS + verifiers.TREES, default="token",
                        help="token: Chen's token-level verification, mrs.verify's law (default); "
                             "block: block verification, mrs.verify_block's law; tree-topk, tree-mss, tree-rrs: "
                             "a tree verifier with mrs.verify_tree_topk's, _mss's or _rrs's contract, checked on "
                             "trees of top-k children, i.i.d. children or children drawn without replacement")
    parser.add_argument("--batch", action="store_true",
                        help="FUNCTION takes x_draft [1, K], p [1, K, V], q [1, K+1, V] and returns [1, n]")
    parser.add_argument("--log-probs", action="store_true", help="FUNCTION takes log p and log q instead of p and q")
    parser.add_argument("--rng", choices=("generator", "seed", "torch", "none"), default="generator",
                        help="what FUNCTION takes last: an object with .random() (default), an integer seed, "
                             "a torch.Generator, or nothing (it draws from Python's random, NumPy's or torch's "
                             "global generator, which the exact tier drives from its uniforms)")
    parser.add_argument("--reseed-globals", action="store_true",
                        help="before each call, seed Python's random, NumPy's global generator and torch's (if "
                             "imported) from the checker's rng, for a FUNCTION that draws from them (with --rng none)")
    parser.add_argument("--returns", choices=("tokens", "count-and-token"), default="tokens",
                        help="tokens: the accepted drafts and one more (default); count-and-token: "
                             "(number accepted, extra token)")
    parser.add_argument("--arrays", choices=("numpy", "torch"), default="numpy",
                        help="numpy arrays (default) or torch tensors (torch.from_numpy) as inputs")
    parser.add_argument("--seed", type=options.SEED, default=0, help="the checker's seed, >= 0 (default 0)")
    parser.add_argument("--no-vectors", action="store_true",
                        help="skip the exact tier (the vectors assume specref's documented order of uniforms)")
    parser.add_argument("--json", metavar="PATH", type=options.output_file(), default=None,
                        help="also write the report to this JSON file")


def load_function(text: str):
    """The callable named by MODULE:FUNCTION; ValueError naming what is missing."""
    module_name, function_name = text.rsplit(":", 1)
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise ValueError(f"argument MODULE:FUNCTION: no file {module_name}")
            folder = str(path.resolve().parent)
            if folder not in sys.path:  # its sibling files import as they do when it runs from its own folder
                sys.path.insert(0, folder)
            spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(path.stem, module)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001  (the user's module: any error while importing it is reported)
        raise ValueError(f"argument MODULE:FUNCTION: importing {module_name} failed: {type(e).__name__}: {e}") from None
    value = module
    for part in function_name.split("."):
        if not hasattr(value, part):
            raise ValueError(f"argument MODULE:FUNCTION: {module_name} has no {function_name}")
        value = getattr(value, part)
    if not callable(value):
        raise ValueError(f"argument MODULE:FUNCTION: {text} is not callable")
    return value


def installed_package() -> Path | None:
    """The folder of the installed specref package (an editable install's source folder), or None if none is."""
    try:
        dist = importlib.metadata.distribution("specref")
    except importlib.metadata.PackageNotFoundError:
        return None
    direct = dist.read_text("direct_url.json")
    if direct and json.loads(direct).get("dir_info", {}).get("editable"):
        return Path(unquote(urlparse(json.loads(direct)["url"]).path)) / "specref"
    return Path(dist.locate_file("specref"))


def shadow_warning(running: Path, installed: Path | None) -> str:
    """A warning when the specref package that runs (`running`, its folder) is not the installed one, else ''."""
    if installed is None or running.resolve() == installed.resolve():
        return ""
    return (f"warning: this run uses the specref package in {running}, not the installed one in {installed} (a "
            "specref/ folder in the current directory comes first on the import path); run from another folder to "
            "check with the installed checker")


def _torch():
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise ValueError("argument --rng/--arrays: torch is not installed") from None


VERIFIER_ONLY = ("algorithm", "batch", "log_probs", "returns", "arrays", "no_vectors", "reseed_globals")
PIPELINE_ONLY = ("reference", "new_tokens", "samples", "vocabulary")


def check_args(args) -> None:
    """Load FUNCTION (or GENERATE and PLAIN) and build the adapter (torch only if asked for), before any check runs."""
    defaults = {"algorithm": "token", "batch": False, "log_probs": False, "returns": "tokens", "arrays": "numpy",
                "no_vectors": False, "reseed_globals": False}
    if args.pipeline is not None:
        if args.target is not None:
            raise ValueError(f"argument MODULE:FUNCTION: not with --pipeline (got {args.target})")
        if args.reference is None:
            raise ValueError("argument --reference: --pipeline needs --reference MODULE:PLAIN")
        given = [name for name in VERIFIER_ONLY if getattr(args, name) != defaults[name]] + \
            (["rng"] if args.rng != "generator" else [])
        if given:
            raise ValueError(f"argument --{given[0].replace('_', '-')}: not with --pipeline")
        args.generate = load_function(args.pipeline)
        args.plain = load_function(args.reference)
        return
    if args.target is None:
        raise ValueError("argument MODULE:FUNCTION: required (or --pipeline MODULE:GENERATE --reference MODULE:PLAIN)")
    given = [name for name in PIPELINE_ONLY if getattr(args, name) is not None]
    if given:
        raise ValueError(f"argument --{given[0].replace('_', '-')}: only with --pipeline")
    if args.algorithm in verifiers.TREES and args.returns != "tokens":
        raise ValueError(f"argument --returns: {args.returns} is not for a tree verifier (a count does not say "
                         "which path was accepted): it returns the path's tokens and one more")
    args.function = load_function(args.target)
    torch = _torch() if "torch" in (args.rng, args.arrays) else None
    rng = (lambda seed: torch.Generator().manual_seed(seed)) if args.rng == "torch" else args.rng
    array = (lambda a: torch.from_numpy(a)) if args.arrays == "torch" else conform.Adapter.array
    args.adapter = conform.Adapter(batch=args.batch, log_probs=args.log_probs, rng=rng,
                                   returns=args.returns.replace("-", "_"), array=array,
                                   reseed_globals=args.reseed_globals)


def run_pipeline(args) -> int:
    print(f"checking {args.pipeline} against {args.reference} (seed {args.seed}) ...", flush=True)
    report = pipeline.check_pipeline(
        args.generate, args.plain, new_tokens=args.new_tokens, samples=args.samples or pipeline.SAMPLES,
        seed=args.seed, vocabulary=args.vocabulary, call_limit=args.call_limit or pipeline.CALL_LIMIT,
        time_limit=args.time_limit or pipeline.RUN_LIMIT, name=args.pipeline, reference_name=args.reference,
        progress=lambda c: print(c.line(), flush=True))
    verdict = report.verdict()
    print(f"{verdict} in {report.seconds:.1f} s; one chi-square check at {conform.FAMILY_LEVEL:g}: "
          f"a correct pipeline fails a run with probability about {conform.FAMILY_LEVEL:g} (nominal)")
    if report.untested:
        print(report.untested_line())
    if report.diagnosis:
        print(f"diagnosis: {report.diagnosis}")
    if args.json:
        write_text(args.json, json.dumps(report.to_json(), indent=1) + "\n")
    return report.status()


def run(args) -> int:
    if not hasattr(args, "adapter") and not hasattr(args, "generate"):
        check_args(args)
    warning = shadow_warning(Path(specref.__file__).parent, installed_package())
    if warning:  # (after the arguments: a bad one is still the one line on stderr)
        print(warning, file=sys.stderr, flush=True)
    if args.pipeline is not None:
        return run_pipeline(args)
    print(f"checking {args.target} as {args.algorithm} verification (seed {args.seed}) ...", flush=True)
    report = conform.check(args.function, args.adapter, algorithm=args.algorithm, seed=args.seed,
                           vectors_tier=not args.no_vectors, name=args.target,
                           progress=lambda c: print(c.line(), flush=True),
                           call_limit=args.call_limit or conform.CALL_LIMIT,
                           time_limit=args.time_limit or conform.RUN_LIMIT)
    verdict = report.verdict()
    m = sum(1 for c in report.checks if c.level is not None)
    print(f"{verdict} in {report.seconds:.0f} s; {m} chi-square checks at {conform.FAMILY_LEVEL:g} / {m} each: "
          f"a correct verifier fails a run with probability about {conform.FAMILY_LEVEL:g} (nominal)")
    if report.untested:
        print(report.untested_line())
    if report.diagnosis:
        print(f"diagnosis: {report.diagnosis}")
    coverage = report.coverage()
    if coverage:                                               # what a pass means: the shipped bugs it would have caught
        print(coverage)
    if args.json:
        write_text(args.json, json.dumps(report.to_json(), indent=1) + "\n")
    return report.status()
