"""The answer to the exercise `exercises.check_roll_back`: the KV cache after one SpS call (K drafts, n accepted)."""


def roll_back(cache, drafts, out):  # KVCache, [K], [n + 1] -> None
    """Forget the K - n rejected drafts: out holds the n accepted drafts, then one token that was never scored."""
    n = len(out) - 1                  # the accepted drafts; out[-1] is the correction (or the bonus token)
    cache.rollback(len(drafts) - n)   # length -= K - n: what lies past the length is never read, and is overwritten
