"""The answer to the exercise `exercises.check_block_weights`: step 1 of block verification (p = draft, q = target)."""

import numpy as np


def block_weights(x_draft, p, q):  # [K], [K, V], [K+1, V] -> [K+1]
    """w_0 = 1 and w_i = min(1, w_{i-1} q_i(x_i) / p_i(x_i)), i = 1..K (1-based: p_i is p[i-1], x_i is x_draft[i-1])."""
    K = len(x_draft)
    w = np.ones(K + 1)  # w[0] = w_0 = 1
    for i in range(1, K + 1):
        x = int(x_draft[i - 1])
        w[i] = min(1.0, w[i - 1] * q[i - 1, x] / p[i - 1, x])
    return w
