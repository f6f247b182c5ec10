"""The answer to the exercise `exercises.check_expected_tokens` (Leviathan's letters: gamma drafts a call)."""


def expected_tokens(alpha, gamma):  # scalar, int -> float
    """Eq. 1: 1 + alpha + ... + alpha**gamma = (1 - alpha**(gamma + 1)) / (1 - alpha), and gamma + 1 at alpha = 1."""
    if alpha == 1:  # the formula is 0 / 0 there; every draft is accepted, plus the bonus token
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)
