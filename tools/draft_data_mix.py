"""What the draft's data at scale is made of: `python3 -m tools.draft_data_mix [DIR]`.

Reads the shards `python3 -m specref draft-data` wrote (DIR: a scale-* directory; default, the only one in
the cache's draft-data/) and prints, per kind of shard (teacher-forced "tf", the target's own completions
"gen", held-out completions "held"), the shards, the positions, the share of the training positions, the
positions that are the target's own sampled tokens (a completion shard's other positions are its prompts),
and the bytes the shards take on disk.  It reads only each shard's small arrays, so it takes seconds.
"""

import argparse
import pathlib
import sys
from collections import Counter

import numpy as np

from specref.smollm2.fetch import cache_root

KINDS = ("tf", "gen", "held")


def mix(root: pathlib.Path) -> dict:
    """kind -> {"shards", "positions", "sampled", "bytes"} over the shards in root."""
    out = {k: Counter() for k in KINDS}
    for path in sorted(root.glob("*.npz")):
        kind = path.name.split("-")[0]
        if kind not in out:
            raise ValueError(f"{path} is not a shard of draft-data (expected names like tf-00000-4789.npz)")
        with np.load(path) as shard:
            sampled = shard["kind"]
            out[kind].update(shards=1, positions=len(sampled), sampled=int((sampled == 1).sum()),
                             bytes=path.stat().st_size)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", help="a scale-* directory of draft-data (default: the one in the cache)")
    args = parser.parse_args(argv)
    if args.dir:
        root = pathlib.Path(args.dir)
    else:
        found = sorted((cache_root() / "draft-data").glob("scale-*"))
        if len(found) != 1:
            sys.exit(f"expected one scale-* directory under {cache_root() / 'draft-data'}, found {len(found)}: "
                     "name the one to read")
        root = found[0]
    if not root.is_dir():
        sys.exit(f"{root} is not a directory")
    try:
        counts = mix(root)
    except ValueError as e:
        sys.exit(str(e))
    training = counts["tf"]["positions"] + counts["gen"]["positions"]
    if not training:
        sys.exit(f"{root} holds no training shards")
    print(f"draft data in {root.name}")
    print(f"{'kind':6} {'shards':>7} {'positions':>10} {'of training':>12} {'sampled':>9} {'sampled share':>14} "
          f"{'MB':>8} {'bytes/position':>15}")
    for kind in KINDS:
        c = counts[kind]
        share = f"{c['positions'] / training:.1%}" if kind != "held" else "-"
        sampled = f"{c['sampled'] / c['positions']:.1%}" if c["positions"] else "-"
        per = f"{c['bytes'] / c['positions']:.0f}" if c["positions"] else "-"
        print(f"{kind:6} {c['shards']:7d} {c['positions']:10d} {share:>12} {c['sampled']:9d} {sampled:>14} "
              f"{c['bytes'] / 1e6:8.1f} {per:>15}")
    sampled = counts["tf"]["sampled"] + counts["gen"]["sampled"]
    size = sum(c["bytes"] for c in counts.values())
    print(f"training positions {training}; the target's own sampled tokens among them {sampled} "
          f"({sampled / training:.1%}); all shards {size / 1e9:.2f} GB on disk, "
          f"{size / sum(c['positions'] for c in counts.values()):.0f} bytes a position")


if __name__ == "__main__":
    main()
