"""Every known way to get speculative sampling wrong, in one home, each defined once.

A known bug is a `Bug`: called like the verifier it breaks it samples, `.law(...)` is its exact law for
fixed drafts (or a fixed tree), `.about` says what it does (the conformance checker's diagnosis).
    broken.py   deliberately broken variants of mrs.verify and mrs.verify_block: the negative controls
    lossy.py    lossy verifiers (typical acceptance, lenience), labelled as such
    shipped.py  the bugs that shipped, each with its single-call form and, for the bugs around the
                verifier, its pipeline form (a `specref.proof.toy.Toy` with one piece changed), and
                GALLERY, where each shipped and what catches it
    tree.py     the known bugs of tree verification, and BUGS, the ones each tree verifier is checked on
The notebooks' gallery of mistakes (specref.lessons.exercises.gallery) and the conformance checker read
these; docs/shipped_bugs.md tells each bug's story.
"""

from __future__ import annotations

from typing import Callable


class Bug:
    """A known way to get verification wrong: call it like `mrs.verify` to sample it; `.law(x_draft, p, q)` is its exact law."""

    def __init__(self, name: str, about: str, sample: Callable | None = None, law: Callable | None = None):
        self.name = self.__name__ = self.__qualname__ = name
        self.about = self.__doc__ = about
        if sample is not None:
            self.sample = sample
        if law is not None:
            self.law = law

    def __call__(self, x_draft, p, q, rng):
        return self.sample(x_draft, p, q, rng)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
