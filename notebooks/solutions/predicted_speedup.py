"""The answer to the exercise `exercises.check_predicted_speedup` (Leviathan's letters: gamma drafts a call)."""


def predicted_speedup(alpha, gamma, c, score_cost):  # scalars -> float
    """Theorem 3.8 with a measured scoring cost: Eq. 1's tokens per call over a call's cost, gamma c + score_cost."""
    if alpha == 1:  # Eq. 1 is 0 / 0 there; every draft is accepted, plus the token the call adds
        tokens = gamma + 1.0
    else:
        tokens = (1 - alpha ** (gamma + 1)) / (1 - alpha)  # 1 + alpha + ... + alpha**gamma
    return tokens / (gamma * c + score_cost)  # a call: gamma draft steps, then one target call scoring gamma + 1
