"""The commands' draft names (`--draft`, `--drafts`): each name -> a draft model.

The core (`specref.drafts`, `specref.smollm2.draft`) defines the drafts and knows no names; the
names are the command line's, listed once in `specref.apps.options.DRAFTS`.  "neural" is the
trained draft of `specref.smollm2.draft`: it needs the target, so callers that offer it pass a
factory.
"""

from __future__ import annotations

from typing import Callable, Iterable

from specref.apps.options import DRAFTS, LOOKUP_DRAFTS, NEURAL_DRAFTS
from specref.drafts import CopyOrModel, NGramDraft, PromptLookupDraft, UniformDraft

__all__ = ["DRAFTS", "LOOKUP_DRAFTS", "by_name", "check_draft_file"]


def by_name(name: str, V: int, corpus: Callable[[], Iterable[Iterable[int]]] = list, ngram_order: int = 2,
            lookup_n: int | None = None, neural: Callable[[], object] | None = None):
    """The draft called `name` (one of DRAFTS); the n-gram is fitted on corpus(), the neural draft made by
    neural(), each asked for only when needed; lookup_n is the prompt lookup's longest match (None: the
    draft's own default, `PromptLookupDraft`)."""
    n = {} if lookup_n is None else {"n": lookup_n}
    if name in ("neural", "neural+lookup"):
        if neural is None:
            raise ValueError(f"the {name} draft needs its target: pass neural=, a function that returns the neural draft")
        return neural() if name == "neural" else CopyOrModel(neural(), V, **n)
    if name in ("prompt-lookup", "prompt-lookup-adaptive"):
        return PromptLookupDraft(V, adaptive=name.endswith("adaptive"), **n)
    if name == "ngram":
        return NGramDraft.fit(corpus(), V, n=ngram_order)
    if name == "uniform":
        return UniformDraft(V)
    raise ValueError(f"unknown draft {name!r}; expected one of {', '.join(DRAFTS)}")


def check_draft_file(path, drafts: list[str]) -> None:
    """ValueError unless `path` (--draft-file) is None, or a readable draft file and some draft runs it."""
    if path is None:
        return
    if not set(drafts) & set(NEURAL_DRAFTS):
        raise ValueError(f"argument --draft-file: only the drafts {', '.join(NEURAL_DRAFTS)} run it, and "
                         f"none of them is among the drafts ({','.join(drafts)})")
    from specref.smollm2.draft import DraftError, load_draft  # the model package, imported only when a file is named
    try:
        load_draft(path)
    except DraftError as e:
        raise ValueError(f"argument --draft-file: {e}") from e
